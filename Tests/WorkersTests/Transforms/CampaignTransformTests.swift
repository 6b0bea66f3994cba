import Foundation
import PropertyBased
import Testing
import Workers
import WorkersTesting

/// 2023-11-20T00:00:00Z, inside the fixtures' campaign period.
let campaignNow: Int64 = 1_700_438_400_000

@Suite struct CampaignFeedTests {
    @Test func feedOrdersOngoingFirstThenRatioThenIdAndEmitsOnlyOnChange() {
        var driver = TestDriver(CampaignFeedTransform(topN: 3))
        let list = "[" + [
            Fixtures.campaign(id: 1, ratio: 50, categoryId: 1),
            Fixtures.campaign(id: 2, ratio: 10, categoryId: 1),
            Fixtures.campaign(id: 3, status: "END", ratio: 5, categoryId: 1, my: #"{"donatedSteps":0,"story":true}"#),
            Fixtures.campaign(id: 4, ratio: 10, categoryId: 2),
            Fixtures.campaign(id: 5, ratio: 1, organizations: #"[{"id":77}]"#, categoryId: 1),
        ].joined(separator: ",") + "]"
        driver.send(value: list, timestamp: campaignNow)
        let feeds = Dictionary(driver.outputs.map { ($0.keyString ?? "", $0.valueString ?? "") }, uniquingKeysWith: { $1 })
        #expect(feeds.keys.sorted() == ["corporate/all", "corporate/animals", "public/all", "public/animals", "public/children"])
        #expect(ids(feeds["public/all"]) == [2, 4, 1])  // top 3: ongoing by ratio then id; ended #3 cut
        #expect(ids(feeds["public/animals"]) == [2, 1, 3])
        #expect(feeds["public/animals"]?.contains(#""id":3,"name":"Walk for puppies 3","ratio":5,"ongoing":false,"resultPosted":true"#) == true)
        #expect(ids(feeds["corporate/animals"]) == [5])
        let count = driver.outputs.count
        // Same data again (redelivery): no change, no output.
        driver.redeliver(from: 0)
        #expect(driver.outputs.count == count)
        // One campaign moves: only the feeds it is in change.
        driver.send(value: Fixtures.campaign(id: 2, ratio: 70, categoryId: 1), timestamp: campaignNow + 1)
        #expect(driver.outputs.dropFirst(count).map(\.keyString) == ["public/all", "public/animals"])
        #expect(ids(driver.outputs.last?.valueString) == [1, 2, 3])
    }

    @Test func campaignsITookPartInComeFromTheUserHeaderOrKey() {
        var driver = TestDriver(CampaignFeedTransform())
        let mine = #"{"donatedSteps":1200,"ranking":3,"story":null}"#
        driver.send(value: Fixtures.campaign(id: 1, my: mine), headers: ["user-id": "u-1"], timestamp: campaignNow)
        driver.send(value: Fixtures.campaign(id: 2, ratio: 5, my: mine), headers: ["user-id": "u-1"], timestamp: campaignNow)
        driver.send(value: Fixtures.campaign(id: 3, my: #"{"donatedSteps":0}"#), headers: ["user-id": "u-1"], timestamp: campaignNow)
        let lists = driver.outputs(named: "campaigns.mine")
        #expect(lists.map(\.keyString) == ["u-1", "u-1"])
        #expect(ids(lists.last?.valueString) == [2, 1])

        var byKey = TestDriver(CampaignFeedTransform(user: .key))
        byKey.send(key: "u-9", value: Fixtures.campaign(id: 4, my: mine), timestamp: campaignNow)
        #expect(byKey.outputs(named: "campaigns.mine").map(\.keyString) == ["u-9"])
    }

    /// Property: every emitted feed is ordered (ongoing first, then ratio, then id) and a tab
    /// only holds campaigns of its segment.
    @Test func feedOrderingInvariant() async {
        let gen = zip(Gen.int(in: 1...40), Gen.int(in: 0...150), Gen.bool, Gen.int(in: 1...6), Gen.bool).array(of: 1...30)
        await propertyCheck(count: 100, input: gen) { rows in
            let stage = CampaignFeedTransform(topN: 10)
            var state = stage.initialState
            let json = "[" + rows.map { id, ratio, ended, category, corporate in
                Fixtures.campaign(
                    id: id, status: ended ? "END" : "START", ratio: ratio,
                    organizations: corporate ? #"[{"id":1}]"# : "[]", categoryId: category)
            }.joined(separator: ",") + "]"
            let record = InputRecord(value: Array(json.utf8), timestamp: campaignNow, origin: RecordOrigin(topic: "t", partition: 0, offset: 0))
            let out = stage.process(record, state: &state, context: TransformContext(now: campaignNow))
            #expect(out.failures.isEmpty)
            for segment in FeedSegment.allCases {
                for category in FeedCategory.allCases {
                    let feed = stage.feed(segment, category, in: state, now: campaignNow)
                    for (a, b) in zip(feed, feed.dropFirst()) {
                        let ao = a.isOngoing(at: campaignNow), bo = b.isOngoing(at: campaignNow)
                        #expect(ao || !bo)
                        if ao == bo { #expect(a.ratio < b.ratio || (a.ratio == b.ratio && a.id < b.id)) }
                    }
                    #expect(feed.allSatisfy { $0.isCorporate == (segment == .corporate) })
                    #expect(state.feeds["\(segment.rawValue)/\(category.rawValue)", default: []].count <= 10)
                }
            }
        }
    }
}

@Suite struct CampaignNotificationTests {
    @Test func goalEndingSoonAndResultPostedOnceEach() {
        var driver = TestDriver(CampaignNotificationTransform())
        // 2023-12-31T23:59:59 KST ends at 2023-12-31T14:59:59Z.
        let end: Int64 = 1_704_034_799_000
        driver.send(value: Fixtures.campaign(id: 7, ratio: 90), timestamp: campaignNow)
        driver.send(value: Fixtures.campaign(id: 7, ratio: 101), timestamp: campaignNow + 1)
        driver.send(value: Fixtures.campaign(id: 7, ratio: 120), timestamp: campaignNow + 2)
        driver.send(value: Fixtures.campaign(id: 7, ratio: 120), timestamp: end - 3_600_000)
        driver.send(
            value: Fixtures.campaign(id: 7, status: "END", ratio: 120, my: #"{"donatedSteps":10,"story":true}"#), timestamp: end + 1)
        driver.redeliver(from: 0)
        #expect(driver.outputs.map(\.dedupeKey) == ["campaign:7:goal-reached", "campaign:7:ending-soon", "campaign:7:result-posted"])
        #expect(driver.outputs.first?.valueString == """
            {"topic":"campaign-7","title":"Goal reached!","body":"Walk for puppies 7 reached 101% of its goal. Thank you for walking!",\
            "data":{"campaign_id":"7","kind":"goal-reached"},"collapse_key":"campaign-7-goal-reached","dedupe_key":"campaign:7:goal-reached"}
            """)
    }

    @Test func aCampaignFirstSeenAboveGoalDidNotCrossWhileWatched() {
        var driver = TestDriver(CampaignNotificationTransform())
        driver.send(value: Fixtures.campaign(id: 8, ratio: 150), timestamp: campaignNow)
        #expect(driver.outputs.isEmpty)
    }
}

/// Campaign ids of a feed snapshot, in order.
func ids(_ json: String?) -> [Int64] {
    guard let data = json?.data(using: .utf8),
        let rows = try? JSONSerialization.jsonObject(with: data) as? [[String: Any]]
    else { return [] }
    return rows.compactMap { ($0["id"] as? NSNumber)?.int64Value }
}
