import Foundation
import Kafka
import Operations
import Testing
@testable import Producers

/// The pollers' pure parts: each upstream's list pages read into keyed items (exact bytes) and
/// the next page, and the change detection.
@Suite struct ListPageTests {
    func page(_ source: PollSource, _ text: String, url: String, number: Int = 0, before: Int = 0) throws(PageError) -> ListPage {
        var request = try source.firstPage(url: url, pageSize: 2)
        request.number = number
        request.itemsBefore = before
        return try source.parse(Array(text.utf8), request: request)
    }

    @Test func campaignsAreABareArrayKeyedByIDWithTheirExactBytes() throws {
        let first = #"{"id":481,"name":"담요","ratio":47, "donatedSteps":1.0E7}"#
        let text = "[ \(first) ,\n{\"id\":492,\"name\":\"b\"}, {\"name\":\"no id\"}]"
        let page = try page(.campaigns, text, url: "http://up.example/campaigns")
        #expect(page.items.map(\.key) == ["481", "492"])
        #expect(page.items[0].value == Array(first.utf8), "exact bytes: numbers and spacing untouched")
        #expect(page.unkeyed == 1)
        #expect(page.next?.url == "http://up.example/campaigns?size=2&page=1", "a full page (3 listed, size 2): the next one is asked for")
    }

    @Test func productsFollowHasNextInEitherEra() throws {
        let url = "http://up.example/api/products"
        let first = try PollSource.products.firstPage(url: url, pageSize: 2)
        #expect(first.url == "http://up.example/api/products?page_no=1&items_per_page=2")
        let newEra = #"{"pageNo":1,"itemsPerPage":2,"totalCount":3,"lastPage":2,"hasNext":true,"hasPrev":false,"pages":[{"id":2093,"vendor_id":29,"vendorName":"w"},{"id":2094}]}"#
        let p1 = try PollSource.products.parse(Array(newEra.utf8), request: first)
        #expect(p1.items.map(\.key) == ["2093", "2094"])
        let second = try #require(p1.next)
        #expect(second.url == "http://up.example/api/products?items_per_page=2&page_no=2")
        let oldEra = #"{"page_no":2,"items_per_page":2,"total_count":3,"last_page":2,"has_next":false,"pages":[{"id":7,"vendor_id":3}]}"#
        let p2 = try PollSource.products.parse(Array(oldEra.utf8), request: second)
        #expect(p2.items.map(\.key) == ["7"])
        #expect(p2.next == nil)
        // Without hasNext, lastPage decides.
        let noFlag = #"{"page_no":1,"last_page":3,"pages":[{"id":1}]}"#
        #expect(try PollSource.products.parse(Array(noFlag.utf8), request: first).next != nil)
        #expect(throws: PageError.self) { try PollSource.products.parse(Array(#"{"pages":[{"id":1}]}"#.utf8), request: first) }
    }

    @Test func hangoutsPageByNumberInThePathUntilTotalCount() throws {
        let url = "http://up.example/hangout/list/{page}?hangoutSort=Newest"
        let first = try PollSource.hangouts.firstPage(url: url, pageSize: 2)
        #expect(first.url == "http://up.example/hangout/list/0?hangoutSort=Newest")
        let body = #"{"status":"OK","message":"ok","data":{"HangoutList":[{"hangoutInfoId":"h-1"},{"hangoutInfoId":"h-2"}],"pageInfo":{"totalCount":3,"currentCount":2}}}"#
        let p1 = try PollSource.hangouts.parse(Array(body.utf8), request: first)
        #expect(p1.items.map(\.key) == ["h-1", "h-2"])
        let second = try #require(p1.next)
        #expect(second.url == "http://up.example/hangout/list/1?hangoutSort=Newest")
        let last = #"{"status":"OK","message":"ok","data":{"HangoutList":[{"hangoutInfoId":"h-3"}],"pageInfo":{"totalCount":3,"currentCount":1}}}"#
        #expect(try PollSource.hangouts.parse(Array(last.utf8), request: second).next == nil)
        // An empty page ends the listing whatever totalCount says.
        let empty = #"{"status":"OK","message":"ok","data":{"HangoutList":[],"pageInfo":{"totalCount":9,"currentCount":0}}}"#
        #expect(try PollSource.hangouts.parse(Array(empty.utf8), request: second).next == nil)
    }

    @Test func challengesPageByLastIDWhileAPageIsFull() throws {
        let url = "http://up.example/challenges/notstarted?categoryId=-1&targetAmount=-1"
        let first = try PollSource.challenges.firstPage(url: url, pageSize: 2)
        // The server's lastId defaults to 10 and it lists id < lastId: the first page asks above every id.
        #expect(first.url == "http://up.example/challenges/notstarted?categoryId=-1&targetAmount=-1&pageSize=2&lastId=9223372036854775807")
        let p1 = try PollSource.challenges.parse(Array(#"[{"id":50,"leaderId":1},{"id":48,"leaderId":2}]"#.utf8), request: first)
        let second = try #require(p1.next)
        #expect(second.url.hasSuffix("&pageSize=2&lastId=48"))
        #expect(try PollSource.challenges.parse(Array(#"[{"id":41}]"#.utf8), request: second).next == nil)
    }

    /// Paged against the real server's semantics (IgoMoney_BE: `lastId` optional with default
    /// 10, `id < lastId`, `ORDER BY id DESC LIMIT pageSize`), every one of 25 challenges is
    /// listed once. (Without a `lastId` on its first request the poller listed ids 1 to 9 only.)
    @Test func everyChallengeIsListedAgainstTheRealServersDefaults() throws {
        let ids = Array(1...25)
        func serve(_ url: String) -> [UInt8] {
            let query = URLComponents(string: url)?.queryItems ?? []
            func value(_ name: String) -> String? { query.last { $0.name == name }?.value.flatMap { $0.isEmpty ? nil : $0 } }
            let lastID = Int64(value("lastId") ?? "10") ?? 10
            let size = Int(value("pageSize") ?? "10") ?? 10
            let page = ids.filter { Int64($0) < lastID }.sorted(by: >).prefix(size)
            return Array("[\(page.map { #"{"id":\#($0),"title":"c\#($0)"}"# }.joined(separator: ","))]".utf8)
        }
        var request: PageRequest? = try PollSource.challenges.firstPage(url: "http://up.example/challenges/notstarted?categoryId=-1&targetAmount=-1", pageSize: 10)
        var listed: [Int] = []
        var pages = 0
        while let current = request, pages < 20 {
            let page = try PollSource.challenges.parse(serve(current.url), request: current)
            listed += page.items.compactMap { item in
                ((try? JSONSerialization.jsonObject(with: Data(item.value))) as? [String: Any])?["id"] as? Int
            }
            request = page.next
            pages += 1
        }
        #expect(listed.sorted() == ids, "listed \(listed.count) of \(ids.count)")
    }

    /// An empty `lastId=` in the configured URL is the server's default (10) to Spring, not "no
    /// limit": the first page asks above every id all the same.
    @Test func anEmptyLastIDInTheURLIsReplaced() throws {
        let first = try PollSource.challenges.firstPage(url: "http://up.example/challenges/notstarted?lastId=&pageSize=", pageSize: 5)
        #expect(first.url == "http://up.example/challenges/notstarted?lastId=9223372036854775807&pageSize=5"
            || first.url == "http://up.example/challenges/notstarted?pageSize=5&lastId=9223372036854775807", "\(first.url)")
    }

    /// Bigwalk's campaign list pages by `page` (from 0) and `size`: the next page while a page is full.
    @Test func campaignsPageFromZeroWhileAPageIsFull() throws {
        let first = try PollSource.campaigns.firstPage(url: "http://up.example/api/campaigns/category/1/story", pageSize: 2)
        #expect(first.url == "http://up.example/api/campaigns/category/1/story?page=0&size=2")
        let p0 = try PollSource.campaigns.parse(Array(#"[{"id":1,"title":"a"},{"id":2,"title":"b"}]"#.utf8), request: first)
        let second = try #require(p0.next)
        #expect(second.url == "http://up.example/api/campaigns/category/1/story?size=2&page=1")
        #expect(try PollSource.campaigns.parse(Array(#"[{"id":3,"title":"c"}]"#.utf8), request: second).next == nil)
    }

    /// Bappy's committed server answers `totalCount: 0` whatever it lists: the poller reads on
    /// until an empty page instead of stopping after the first.
    @Test func hangoutsWithoutACountAreReadUntilAnEmptyPage() throws {
        let first = try PollSource.hangouts.firstPage(url: "http://up.example/hangout/list/{page}", pageSize: 10)
        let full = #"{"status":"OK","message":"hangout list","data":{"HangoutList":[{"hangoutInfoId":"h-1"}],"pageInfo":{"totalCount":0,"currentCount":10}}}"#
        let next = try #require(try PollSource.hangouts.parse(Array(full.utf8), request: first).next)
        #expect(next.url == "http://up.example/hangout/list/1")
        let empty = #"{"status":"OK","message":"hangout list","data":{"HangoutList":[],"pageInfo":{"totalCount":0,"currentCount":10}}}"#
        #expect(try PollSource.hangouts.parse(Array(empty.utf8), request: next).next == nil)
    }

    @Test func aPageThatIsNotItsFormatSaysWhyWithItsURL() {
        let cases: [(PollSource, String, String)] = [
            (.campaigns, "{\"id\":1}", "expected a JSON array"),
            (.campaigns, "[{\"id\":1}", "not valid JSON"),
            (.products, "[]", "no array at pages"),
            (.hangouts, #"{"status":"FAIL","message":"x","data":false}"#, "no array at data.HangoutList"),
            (.challenges, "<html>503</html>", "not valid JSON"),
        ]
        for (source, body, reason) in cases {
            do {
                _ = try page(source, body, url: "http://up.example/x")
                Issue.record("\(source) \(body) parsed")
            } catch {
                #expect(error.reason.contains(reason), "\(error)")
                #expect(error.url.hasPrefix("http://up.example/x"))
            }
        }
    }

    @Test func aURLThatIsNotHTTPIsRefused() {
        #expect(throws: PageError.self) { try PollSource.campaigns.firstPage(url: "file:///etc/passwd", pageSize: 1) }
        #expect(throws: PageError.self) { try PollSource.campaigns.firstPage(url: "not a url", pageSize: 1) }
    }
}

@Suite struct ChangeLedgerTests {
    func item(_ key: String, _ value: String) -> ListItem { ListItem(key: key, value: Array(value.utf8)) }

    @Test func onlyNewAndChangedContentIsAChange() {
        var ledger = ChangeLedger()
        let first = [item("1", "a"), item("2", "b")]
        #expect(ledger.changes(in: first).changed == first)
        for i in first { ledger.produced(i.key, hash: i.hash) }
        #expect(ledger.changes(in: first).changed.isEmpty, "the same content again is no change")
        let next = [item("1", "a"), item("2", "b2"), item("3", "c")]
        #expect(ledger.changes(in: next).changed.map(\.key) == ["2", "3"])
    }

    @Test func aKeyListedTwiceInOnePollCountsOnce() {
        let (changed, duplicates) = ChangeLedger().changes(in: [item("1", "a"), item("1", "a2"), item("2", "b")])
        #expect(changed.map(\.value) == [Array("a".utf8), Array("b".utf8)])
        #expect(duplicates == 1)
    }

    @Test func vanishedKeysAreThoseAListingNoLongerHas() {
        var ledger = ChangeLedger()
        for k in ["3", "1", "2"] { ledger.produced(k, hash: 1) }
        #expect(ledger.vanished(listed: ["2"]) == ["1", "3"])
        ledger.deleted("1")
        #expect(ledger.vanished(listed: ["2"]) == ["3"])
    }

    @Test func theStateTopicRecordsAreKeyToHexHashOrATombstone() {
        let records = LedgerTopic(topic: "s", kafka: KafkaConfiguration(bootstrapServers: ["x:1"])).records([("a", 0xAB), ("b", nil)])
        #expect(records.map(\.topic) == ["s", "s"])
        #expect(records[0].key == Array("a".utf8))
        #expect(records[0].value == Array("00000000000000ab".utf8))
        #expect(records[1].value == nil)
        #expect(ContentHash.of([]) == 0xcbf2_9ce4_8422_2325, "FNV-1a's offset basis")
        #expect(ContentHash.of(Array("a".utf8)) == 0xaf63_dc4c_8601_ec8c, "FNV-1a 64 of \"a\"")
    }
}

@Suite struct PollHealthTests {
    @Test func readyUntilTheTimeoutPassesWithoutASuccessfulPoll() {
        let health = PollHealth(readinessTimeout: .seconds(60))
        let t0 = ContinuousClock.now
        #expect(!health.readiness(now: t0).ok, "not ready while the state topic loads")
        health.started(now: t0)
        #expect(health.readiness(now: t0 + .seconds(59)).ok)
        let late = health.readiness(now: t0 + .seconds(61))
        #expect(!late.ok && late.reason.contains("since the start"), "\(late.reason)")
        health.polled(now: t0 + .seconds(70))
        #expect(health.readiness(now: t0 + .seconds(100)).ok)
        #expect(!health.readiness(now: t0 + .seconds(131)).ok)
        health.stopping()
        #expect(health.readiness(now: t0 + .seconds(71)).reason == "stopping")
        #expect(health.liveness(now: t0).ok)
    }
}
