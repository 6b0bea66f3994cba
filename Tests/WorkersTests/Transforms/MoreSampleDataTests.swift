import Foundation
import Testing
import Workers

/// The price, product and campaign samples in `samples/` (upstream formats, written for the
/// project): every line decodes through its app's decode stage without a failure, and the apps'
/// chains produce their outputs over them (candles, thumbnail requests, "new products"
/// notifications, campaign feeds and campaign notifications).
@Suite struct MoreSampleDataTests {
    struct Run {
        /// Output lines (`{"type":"output",…}`).
        var outputs: [String] = []
        /// Dead letters (and anything else that is not an output), with the file and line number.
        var failures: [String] = []
        var lines = 0
        /// Lines that produced no output at all.
        var silentLines: [String] = []

        func outputs(_ name: String) -> [String] { outputs.filter { $0.contains(#""output":"\#(name)""#) } }
    }

    /// Runs each sample file of `app` as its own stream through a fresh chain of `stages`, then
    /// lets time pass to each of `ticks`.
    func run(_ app: String, _ stages: [String], advanceTo ticks: [Int64] = []) throws -> Run {
        let lines = try AppFixtures.sampleLines(app)
        var result = Run(lines: lines.count)
        for file in Set(lines.map(\.file)).sorted() {
            var runner = JSONLinesRunner(runner: try TransformCatalog().runner(for: stages), defaultTopic: file)
            var number = 0
            for (f, line) in lines where f == file {
                number += 1
                let out = runner.process(line: line)
                if out.isEmpty { result.silentLines.append("\(file):\(number)") }
                for o in out {
                    if o.hasPrefix(#"{"type":"output""#) {
                        result.outputs.append(o)
                    } else {
                        result.failures.append("\(file):\(number): \(o.prefix(400))")
                    }
                }
            }
            for t in ticks {
                for o in runner.advance(to: t) {
                    if o.hasPrefix(#"{"type":"output""#) { result.outputs.append(o) } else { result.failures.append("\(file): advance: \(o.prefix(400))") }
                }
            }
        }
        return result
    }

    /// The `value` object of an output line.
    func value(_ line: String) -> [String: Any] {
        let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        return object?["value"] as? [String: Any] ?? [:]
    }

    func valueArray(_ line: String) -> [[String: Any]] {
        let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        return object?["value"] as? [[String: Any]] ?? []
    }

    func number(_ any: Any?) -> Double { (any as? NSNumber)?.doubleValue ?? .nan }

    func key(_ line: String) -> String {
        let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        return object?["key"] as? String ?? ""
    }

    static let markets = ["KRW-BTC", "KRW-XRP", "KRW-ETH", "KRW-DOGE", "KRW-SOL", "KRW-ADA", "KRW-LINK", "KRW-AVAX"]

    // MARK: Prices

    @Test func priceSamplesDecodeWithoutFailure() throws {
        let r = try run("prices", ["prices.decode"])
        #expect(r.lines >= 1_500)
        #expect(r.failures.isEmpty, "\(r.failures.prefix(5))")
        #expect(r.silentLines.isEmpty, "\(r.silentLines.prefix(5))")
        // One tick per line, more for the REST arrays (several markets per reply).
        let ticks = r.outputs("prices.ticks")
        #expect(ticks.count > r.lines)
        #expect(Set(ticks.map(key)) == Set(Self.markets))
    }

    @Test func candlesOverThePriceSamples() throws {
        // The stream covers 05:29:5x (snapshots) to 05:39:59 UTC: every market trades in every
        // minute, and the watermark passes 05:38's end plus the 10 s lateness, so ten minutes
        // per market close; 05:39 is still open when the stream ends.
        let r = try run("prices", ["prices.candles"])
        #expect(r.failures.isEmpty, "\(r.failures.prefix(5))")
        let candles = r.outputs("prices.candles.1m").map(value)
        #expect(candles.count == 80)
        for market in Self.markets {
            let mine = candles.filter { $0["market"] as? String == market }
            #expect(mine.count == 10, "\(market)")
            let minutes = mine.compactMap { $0["candle_date_time_utc"] as? String }
            #expect(minutes.first == "2025-03-12T05:29:00" && minutes.last == "2025-03-12T05:38:00", "\(market): \(minutes)")
        }
        for c in candles {
            let (o, h, l, close) = (number(c["opening_price"]), number(c["high_price"]), number(c["low_price"]), number(c["trade_price"]))
            #expect(l > 0 && l <= min(o, close) && h >= max(o, close), "\(c)")
            #expect(number(c["candle_acc_trade_volume"]) > 0)
        }
    }

    // MARK: Products

    @Test func productSamplesDecodeWithoutFailure() throws {
        let r = try run("products", ["products.decode"])
        #expect(r.lines >= 55)
        #expect(r.failures.isEmpty, "\(r.failures)")
        #expect(r.silentLines.isEmpty, "\(r.silentLines)")
        let events = r.outputs("products.events")
        #expect(events.count > r.lines)  // pages hold several products
        for kind in ["created", "updated", "deleted"] {
            #expect(events.contains { $0.contains(#""event-type":"\#(kind)""#) }, "no \(kind) event")
        }
        #expect(events.filter { $0.contains(#""event-type":"deleted""#) }.count == 5)
        // Both eras: a new-era vendorName and an old-era vendors.name both end up as the vendor name.
        #expect(events.contains { $0.contains(#""vendorName":"wongbing""#) })
        #expect(events.contains { $0.contains(#""vendorName":"keyclack""#) })
    }

    @Test func productChainsOverTheSamples() throws {
        // 2022-10-18 14:30 KST: well after the last post, every five-minute window has closed.
        let end: Int64 = 1_666_071_000_000
        let news = try run("products", ["products.new-notifications"], advanceTo: [end])
        #expect(news.failures.isEmpty, "\(news.failures)")
        let pushes = news.outputs("notifications")
        #expect(pushes.count >= 4)
        for category in ["kitchen", "electronics", "stationery", "living", "all"] {
            #expect(pushes.contains { $0.contains(#""topic":"new-products-\#(category)""#) }, "no push for \(category)")
        }
        // Each of the 19 products posted in the window is announced once, whatever pages repeat it.
        let announced = pushes.map(value).compactMap { ($0["data"] as? [String: Any])?["count"] as? String }.compactMap { Int($0) }
        #expect(announced.reduce(0, +) == 19)

        let thumbs = try run("products", ["products.thumbnails"])
        #expect(thumbs.failures.isEmpty, "\(thumbs.failures)")
        let requests = thumbs.outputs("thumbnails.requests").map(value)
        #expect(requests.count >= 50)
        let urls = Set(requests.compactMap { $0["source_url"] as? String })
        #expect(urls.allSatisfy { $0.hasPrefix("http://127.0.0.1:8089/images/") && $0.hasSuffix(".jpg") }, "\(urls)")
        #expect(urls.contains("http://127.0.0.1:8089/images/canvas-tote-2b.jpg"))  // a replaced photo
        #expect(Set(requests.compactMap { $0["owner"] as? String }) == ["product"], "one request per image; the worker renders every size")
    }

    // MARK: Campaigns

    @Test func campaignSamplesDecodeWithoutFailure() throws {
        let r = try run("campaigns", ["campaigns.feed"])
        #expect(r.lines >= 40)
        #expect(r.failures.isEmpty, "\(r.failures)")
        // The notification stage decodes every line too (it emits less often, so failures are the check).
        let n = try run("campaigns", ["campaigns.notifications"])
        #expect(n.failures.isEmpty, "\(n.failures)")
    }

    @Test func campaignChainsOverTheSamples() throws {
        let feed = try run("campaigns", ["campaigns.feed"])
        let snapshots = feed.outputs("campaigns.feed")
        // Both segments × all seven category tabs.
        var tabs: Set<String> = []
        for s in ["public", "corporate"] { for c in FeedCategory.allCases { tabs.insert("\(s)/\(c.rawValue)") } }
        #expect(Set(snapshots.map(key)) == tabs)
        // Ongoing on top, then ascending ratio.
        for line in snapshots {
            let rows = valueArray(line)
            let ongoing = rows.map { $0["ongoing"] as? Bool ?? false }
            #expect(ongoing == ongoing.sorted { $0 && !$1 }, "\(key(line))")
        }
        #expect(snapshots.contains { $0.contains(#""resultPosted":true"#) })
        let mine = feed.outputs("campaigns.mine")
        #expect(Set(mine.map(key)) == ["87412", "103958"])

        let notes = try run("campaigns", ["campaigns.notifications"])
        #expect(notes.failures.isEmpty, "\(notes.failures)")
        let pushes = notes.outputs("notifications").map(value).compactMap { $0["data"] as? [String: Any] }
        func ids(_ kind: String) -> Set<String> {
            Set(pushes.filter { $0["kind"] as? String == kind }.compactMap { $0["campaign_id"] as? String })
        }
        #expect(ids("goal-reached") == ["481", "492", "501", "505", "511"])
        #expect(ids("ending-soon") == ["481", "488", "492", "501", "503", "505", "511"])
        #expect(ids("result-posted") == ["481", "492", "505", "511"])
    }
}
