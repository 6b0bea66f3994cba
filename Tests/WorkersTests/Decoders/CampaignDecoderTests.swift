import Foundation
import Testing
import Workers

@Suite struct CampaignDecoderTests {
    let decoder = CampaignDecoder()

    @Test func decodesABareArrayWithKoreanLocalDates() throws {
        let text = "[\(Fixtures.campaign(id: 1)),\(Fixtures.campaign(id: 2, status: "END", ratio: 130, organizations: #"[{"id":9},{"id":10}]"#))]"
        let campaigns = try decoder.decode(Fixtures.bytes(text))
        #expect(campaigns.count == 2)
        let c = campaigns[0]
        #expect(c.id == 1)
        #expect(c.status == .start)
        #expect(c.ratio == 42)
        #expect(c.participantCount == 1234)
        // 2023-11-01T00:00:00 KST = 2023-10-31T15:00:00Z
        #expect(c.startDate == 1_698_764_400_000)
        #expect(c.promoterName == "Bigwalk")
        #expect(c.thumbnail == "https://img.example.com/c/s")
        #expect(c.my == nil)
        #expect(!c.isCorporate)
        #expect(campaigns[1].organizationIds == [9, 10])
        #expect(campaigns[1].ratio == 130)
    }

    @Test func endedCampaignQuirks() throws {
        // Negative remainedDaysToEnd once ended, service as an object, event null, 12-hour formatted dates ignored.
        let text = Fixtures.campaign(status: "END", ratio: 230)
            .replacingOccurrences(of: #""remainedDaysToEnd":39"#, with: #""remainedDaysToEnd":-12"#)
            .replacingOccurrences(of: #""service":null"#, with: #""service":{"id":3,"type":"WALK"}"#)
            .replacingOccurrences(of: #""formattedEndDate":"2023.12.31 11:59""#, with: #""formattedEndDate":"2023.12.31 11:59 nonsense""#)
        #expect(text.contains("-12") && text.contains("WALK"))
        let c = try #require(try decoder.decode(Fixtures.bytes(text)).first)
        #expect(c.status == .end)
        #expect(c.ratio == 230)
        #expect(!c.isOngoing(at: 0))
    }

    @Test func zoneIsConfigurable() throws {
        let utc = CampaignDecoder(utcOffsetSeconds: 0)
        let c = try #require(try utc.decode(Fixtures.bytes(Fixtures.campaign())).first)
        #expect(c.startDate == 1_698_796_800_000)
    }

    @Test(arguments: [
        #"{"donatedSteps":1200,"ranking":3,"lastDonatedDateTime":"2023-11-20T08:01:02.123","story":true}"#,
        #"{"donatedSteps":1200,"ranking":3,"lastDonatedDateTime":"2023-11-20T08:01:02.123456","story":"https://story"}"#,
        #"{"donatedSteps":1200,"ranking":3,"lastDonatedDateTime":null,"story":{"id":5}}"#,
    ])
    func myParticipationWithBothFractionLengthsAndStoryShapes(_ my: String) throws {
        let c = try #require(try decoder.decode(Fixtures.bytes(Fixtures.campaign(my: my))).first)
        #expect(c.my?.donatedSteps == 1200)
        #expect(c.my?.ranking == 3)
        #expect(c.my?.storyPublished == true)
        if my.contains("08:01:02") { #expect(c.my?.lastDonatedAt == 1_700_434_862_123) }
    }

    @Test func outputReadsBackUnchanged() throws {
        let c = try #require(try decoder.decode(Fixtures.bytes(Fixtures.campaign(my: #"{"donatedSteps":5,"story":false}"#))).first)
        #expect(try decoder.decode(c.jsonBytes()) == [c])
    }

    @Test(arguments: [
        (#""status":"START""#, #""status":"PAUSED""#, "status", DecodeFailure.Reason.invalidValue),
        (#""ratio":42"#, #""ratio":-1"#, "ratio", .invalidValue),
        (#""ratio":42"#, #""ratio":"42""#, "ratio", .wrongType),
        (#""endDate":"2023-12-31T23:59:59""#, #""endDate":"2023-10-01T00:00:00""#, "endDate", .invalidValue),
        (#""endDate":"2023-12-31T23:59:59""#, #""endDate":null"#, "endDate", .missingField),
        (#""categoryId":2,"#, "", "categoryId", .missingField),
        (#""organizations":[]"#, #""organizations":[{"name":"x"}]"#, "organizations[0].id", .missingField),
    ])
    func invalidCampaignsFailNamingTheField(_ from: String, _ to: String, _ field: String, _ reason: DecodeFailure.Reason) {
        let text = Fixtures.campaign().replacingOccurrences(of: from, with: to)
        #expect(text != Fixtures.campaign())
        let failure = expectFailure { () throws(DecodeFailure) in try decoder.decode(Fixtures.bytes(text)) }
        #expect(failure?.field == field, "\(String(describing: failure))")
        #expect(failure?.reason == reason, "\(String(describing: failure))")
    }
}
