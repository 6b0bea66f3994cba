import Foundation
import Testing
import Workers

@Suite struct HangoutDecoderTests {
    let decoder = HangoutDecoder()

    func one(_ text: String, user: String? = nil) throws -> HangoutEvent {
        let events = try decoder.decode(Fixtures.bytes(text), user: user)
        try #require(events.count == 1)
        return events[0]
    }

    @Test func formatsExampleGolden() throws {
        let event = try one(AppFixtures.hangoutEnvelope.replacingOccurrences(of: #""hangoutMeetTime""#, with: #""hangoutPlan":"p","hangoutMeetTime""#))
        guard case .hangout(let h) = event else { Issue.record("not a hangout: \(event)"); return }
        #expect(h == Hangout(
            id: "h-91", title: "Board games on Friday", plan: "p", meetTime: AppFixtures.meet, language: "English",
            categories: [.boardgame, .cafe], openChat: "https://chat.example/x1", limit: 6, currentCount: 2, likeCount: 1,
            imageFile: "a1b2.jpg", place: HangoutPlace(name: "Dice Cafe", address: "5 Main St", latitude: 35.23, longitude: 129.08),
            status: .open, joined: [HangoutUser(id: "u1", imageURL: "u1.jpg"), HangoutUser(id: "u2", imageURL: "u2.jpg")],
            liked: [HangoutUser(id: "u3", imageURL: "u3.jpg")]))
        #expect(h.organiserId == "u1")
        #expect(String(decoding: h.jsonBytes(), as: UTF8.self) == """
            {"hangoutInfoId":"h-91","hangoutTitle":"Board games on Friday","hangoutPlan":"p","hangoutMeetTime":"2024-05-10T10:30:00.000Z",\
            "hangoutLanguage":"English","hangoutCategory":["Boardgame","Cafe"],"hangoutOpenChat":"https://chat.example/x1",\
            "hangoutTotalNum":6,"hangoutCurrentNum":2,"hangoutLikeCount":1,"hangoutImageUrl":"a1b2.jpg",\
            "place":{"placeName":"Dice Cafe","placeAddress":"5 Main St","placeLatitude":35.23,"placeLongitude":129.08},\
            "hangoutJoinUserId":["u1","u2"],"hangoutJoinUserImageUrl":["u1.jpg","u2.jpg"],"hangoutLikeUserId":["u3"],\
            "hangoutLikeUserImageUrl":["u3.jpg"],"hangoutStatus":"open"}
            """)
        // The normalised form reads back to the same hangout.
        #expect(try decoder.decode(h.jsonBytes()) == [.hangout(h)])
    }

    @Test func theExampleWithoutAPlanIsMissingTheField() {
        let failure = expectFailure { () throws(DecodeFailure) in try decoder.decode(Fixtures.bytes(AppFixtures.hangoutEnvelope)) }
        #expect(failure == DecodeFailure(field: "data.hangoutPlan", reason: .missingField, detail: "required field is missing or null"))
    }

    @Test func bareEnvelopedAndListPageAgree() throws {
        let bare = try decoder.decode(Fixtures.bytes(AppFixtures.hangout()))
        let enveloped = try decoder.decode(Fixtures.bytes(#"{"status":"OK","message":"ok","token":3,"data":\#(AppFixtures.hangout())}"#))
        let page = try decoder.decode(Fixtures.bytes("""
            {"status":"OK","message":"ok","data":{"HangoutList":[\(AppFixtures.hangout()),\(AppFixtures.hangout(id: "h-92"))],\
            "pageInfo":{"totalCount":2,"currentCount":2}}}
            """))
        #expect(bare == enveloped)
        #expect(page.count == 2)
        #expect(page.first == bare.first)
        #expect(try decoder.decode(Fixtures.bytes(#"{"status":"OK","message":"ok","data":{"HangoutList":[],"pageInfo":{}}}"#)).isEmpty)
    }

    @Test func meetTimeIsZonelessLocalTimeAtTheConfiguredOffset() throws {
        let utc = HangoutDecoder(utcOffsetSeconds: 0)
        guard case .hangout(let h)? = try utc.decode(Fixtures.bytes(AppFixtures.hangout())).first else { Issue.record("no hangout"); return }
        #expect(h.meetTime == AppFixtures.meet + 9 * 3_600_000)
        let bad = expectFailure { () throws(DecodeFailure) in try decoder.decode(Fixtures.bytes(AppFixtures.hangout(meet: "2024-05-10 7:30 PM"))) }
        #expect(bad?.field == "hangoutMeetTime")
        #expect(bad?.reason == .invalidValue)
        let impossible = expectFailure { () throws(DecodeFailure) in try decoder.decode(Fixtures.bytes(AppFixtures.hangout(meet: "2024-02-30 19:30"))) }
        #expect(impossible?.field == "hangoutMeetTime")
    }

    /// Writes: multipart fields flattened, coordinates and counts as strings, one category as a
    /// single value, the API's `Projcets` and the corrected spelling.
    @Test func writeFormQuirks() throws {
        let form = """
            {"hangoutInfoId":"h-7","hangoutTitle":"Side project meetup","hangoutPlan":"Show what you build.",\
            "hangoutMeetTime":"2024-05-11 19:00","hangoutLanguage":"English","hangoutCategory":"Projcets",\
            "hangoutTotalNum":"8","placeName":"Centum Library","placeLatitude":"35.1691","placeLongitude":"129.1315"}
            """
        guard case .hangout(let h) = try one(form) else { Issue.record("not a hangout"); return }
        #expect(h.categories == [.projects])
        #expect(h.limit == 8)
        #expect(h.currentCount == 0)
        #expect(h.place == HangoutPlace(name: "Centum Library", address: nil, latitude: 35.1691, longitude: 129.1315))
        let fixed = form.replacingOccurrences(of: #""Projcets""#, with: #"["Projects","Career"]"#)
        guard case .hangout(let h2) = try one(fixed) else { Issue.record("not a hangout"); return }
        #expect(h2.categories == [.projects, .career])
    }

    @Test func statusOtherThanOpenOrClosedIsExpired() throws {
        for (raw, status) in [("open", HangoutStatus.open), ("closed", .closed), ("expired", .expired), ("done", .expired)] {
            guard case .hangout(let h) = try one(AppFixtures.hangout(status: raw)) else { Issue.record("not a hangout"); continue }
            #expect(h.status == status)
        }
    }

    @Test func membershipCancellationAndUserMessages() throws {
        #expect(try one(AppFixtures.join("h-91", "u9")) == .membership(hangoutId: "h-91", userId: "u9", joined: true))
        // `cancel` means leave; the user may come from the header instead of the capture.
        #expect(try one(#"{"method":"PUT","path":"/hangout/h-91/","form":{"action":["cancel"]}}"#, user: "u9")
            == .membership(hangoutId: "h-91", userId: "u9", joined: false))
        #expect(try one(#"{"method":"DELETE","path":"hangout/h-91"}"#) == .cancelled(hangoutId: "h-91"))
        let tombstone = InputRecord(key: Array("h-91".utf8), value: nil, timestamp: 0, origin: RecordOrigin(topic: "t", partition: 0, offset: 0))
        #expect(try decoder.decode(tombstone) == [.cancelled(hangoutId: "h-91")])
        let places = #"{"status":"OK","message":"ok","data":[{"locationID":12,"locationName":"Home","locationAddress":"1 Beach Rd","latitude":"35.15","longitude":129.11,"isSelected":true}]}"#
        #expect(try one(places, user: "u9") == .savedPlaces(userId: "u9", places: [
            SavedPlace(id: "12", name: "Home", address: "1 Beach Rd", latitude: 35.15, longitude: 129.11, isSelected: true),
        ]))
        #expect(try one("[]", user: "u9") == .savedPlaces(userId: "u9", places: []))
        #expect(try one(#"{"hangoutNoti":true,"newHangoutNoti":false}"#, user: "u9")
            == .settings(userId: "u9", HangoutNotificationSettings(hangoutNoti: true, newHangoutNoti: false)))
        #expect(try one(#"{"method":"PUT","path":"notification","form":{"hangoutNoti":"false","newHangoutNoti":"true"}}"#, user: "u9")
            == .settings(userId: "u9", HangoutNotificationSettings(hangoutNoti: false, newHangoutNoti: true)))
        #expect(try one(#"{"method":"PUT","path":"user/fcmToken","form":{"fcmToken":"tok"}}"#, user: "u9") == .fcmToken(userId: "u9", token: "tok"))
        // Every event's normalised form reads back to itself.
        for e in [HangoutEvent.membership(hangoutId: "h", userId: "u", joined: false), .savedPlaces(userId: "u", places: []),
                  .settings(userId: "u", .init()), .fcmToken(userId: "u", token: "t")] {
            #expect(try decoder.decode(try #require(e.jsonBytes()), user: e.userId) == [e])
        }
    }

    struct Bad: Sendable, CustomTestStringConvertible {
        var text: String, field: String, reason: DecodeFailure.Reason
        init(_ text: String, _ field: String, _ reason: DecodeFailure.Reason) { (self.text, self.field, self.reason) = (text, field, reason) }
        var testDescription: String { field }
    }

    static let invalid: [Bad] = {
        var cases: [Bad] = []
        cases += [
            Bad(AppFixtures.hangout().replacingOccurrences(of: #""hangoutJoinUserImageUrl":["u1.jpg","u2.jpg"]"#, with: #""hangoutJoinUserImageUrl":["u1.jpg"]"#),
                "hangoutJoinUserImageUrl", .invalidValue),
            Bad(AppFixtures.hangout().replacingOccurrences(of: #""hangoutLikeUserImageUrl":["u3.jpg"]"#, with: #""hangoutLikeUserImageUrl":[]"#),
                "hangoutLikeUserImageUrl", .invalidValue),
            Bad(AppFixtures.hangout(lat: 95), "place.placeLatitude", .invalidValue),
            Bad(AppFixtures.hangout(lng: -181), "place.placeLongitude", .invalidValue),
            Bad(AppFixtures.hangout(joined: ["a", "b", "c"], total: 2), "hangoutCurrentNum", .invalidValue),
            Bad(AppFixtures.hangout(total: 0), "hangoutTotalNum", .invalidValue),
            Bad(AppFixtures.hangout().replacingOccurrences(of: #""Cafe""#, with: #""Karaoke""#), "hangoutCategory[1]", .invalidValue),
            Bad(AppFixtures.hangout().replacingOccurrences(of: #""hangoutCurrentNum":2"#, with: #""hangoutCurrentNum":-2"#), "hangoutCurrentNum", .invalidValue),
            Bad(AppFixtures.hangout().replacingOccurrences(of: #""hangoutTitle":"Board games on Friday","#, with: ""), "hangoutTitle", .missingField),
            Bad(AppFixtures.hangout().replacingOccurrences(of: #""placeName":"Dice Cafe","#, with: ""), "place.placeName", .missingField),
            Bad(#"{"status":"OK","message":"ok","data":true}"#, "data", .invalidValue),
            Bad(#"{"status":"OK","message":"ok"}"#, "data", .missingField),
            Bad(#"{"status":"OK","message":"ok","data":{"HangoutList":[{"hangoutInfoId":"x"}]}}"#, "data.HangoutList[0].hangoutTitle", .missingField),
            Bad(#"{"method":"PUT","path":"hangout/h-1","userId":"u","form":{"action":"leave"}}"#, "action", .invalidValue),
            Bad(#"{"method":"POST","path":"hangout/review"}"#, "path", .invalidValue),
            Bad(#"{"hangoutNoti":true,"newHangoutNoti":true}"#, "header:user-id", .missingField),
            Bad(#"{"hangoutNoti":"yes","newHangoutNoti":true}"#, "hangoutNoti", .invalidValue),
            Bad(#"{"unrelated":1}"#, "$", .invalidValue),
            Bad(#"{"status":"OK","data":{"hangoutInfoId":"h","hangoutMeetTime":"#, "data.hangoutMeetTime", .malformedJSON),
        ]
        return cases
    }()

    @Test(arguments: invalid)
    func invalidMessagesFailNamingTheField(_ bad: Bad) {
        let (text, field, reason) = (bad.text, bad.field, bad.reason)
        let failure = expectFailure { () throws(DecodeFailure) in try decoder.decode(Fixtures.bytes(text)) }
        #expect(failure?.field == field, "\(String(describing: failure))")
        #expect(failure?.reason == reason, "\(String(describing: failure))")
    }

    @Test func greatCircleDistances() {
        // Seomyeon to Haeundae Market: about 9.5 km; one degree of latitude: about 111.2 km (haversine, R = 6371.0088 km).
        let d = HangoutNotificationTransform.distanceMeters(lat1: 35.1577, lng1: 129.0593, lat2: 35.1631, lng2: 129.1635)
        #expect(abs(d - 9_490) < 150, "\(d)")
        let degree = HangoutNotificationTransform.distanceMeters(lat1: 0, lng1: 0, lat2: 1, lng2: 0)
        #expect(abs(degree - 111_195) < 5, "\(degree)")
        let antipode = HangoutNotificationTransform.distanceMeters(lat1: 10, lng1: 20, lat2: -10, lng2: -160)
        #expect(abs(antipode - 20_015_115) < 50, "\(antipode)")
        #expect(HangoutNotificationTransform.distanceMeters(lat1: 35, lng1: 129, lat2: 35, lng2: 129) == 0)
    }
}
