import Testing
import Workers
import WorkersTesting

/// At-least-once delivery: every catalog stage, fed a mixed stream and then the whole stream
/// again, produces on redelivery only outputs whose dedupe keys it already produced.
@Suite struct RedeliveryTests {
    static let stream: [(key: String?, value: String?, headers: [String: String], time: Int64)] = [
        ("KRW-BTC", tick(price: 100, at: minute0 + 1_000, rate: 0.06), [:], minute0 + 1_000),
        ("KRW-BTC", tick(price: 101, at: minute0 + 61_000, rate: 0.01), [:], minute0 + 61_000),
        ("KRW-BTC", tick(price: 102, at: minute0 + 200_000, rate: 0.07), [:], minute0 + 200_000),
        (nil, Fixtures.upbitREST, [:], minute0 + 200_500),
        ("p", Fixtures.productPageOld, ["category": "laptops"], minute0 + 201_000),
        ("p", Fixtures.productDetail, [:], minute0 + 202_000),
        ("16", nil, [:], minute0 + 203_000),
        ("c", "[\(Fixtures.campaign(id: 1, ratio: 99)),\(Fixtures.campaign(id: 2))]", ["user-id": "u1"], campaignNow),
        ("c", Fixtures.campaign(id: 1, ratio: 100, my: #"{"donatedSteps":3}"#), ["user-id": "u1"], campaignNow + 1),
        ("n", #"{"topic":"t","title":"a","body":"b","dedupe_key":"k1"}"#, [:], campaignNow + 2),
        ("g", "garbage", [:], campaignNow + 3),
    ]

    @Test(arguments: TransformCatalog.names)
    func redeliveryOnlyRepeatsKnownOutputs(_ name: String) throws {
        var options = TransformCatalog.Options()
        options.alerts = [.init(subscriber: "tok", market: "KRW-BTC", threshold: 0.05)]
        options.newProductsIntervalMillis = 1_000
        let stage = try TransformCatalog(options: options).transform(named: name)
        try check(stage)
    }

    private func check<S: Transform>(_ stage: S) throws {
        var driver = TestDriver(stage, partitions: 3)
        for r in Self.stream {
            driver.send(key: r.key, value: r.value, headers: r.headers, timestamp: r.time)
        }
        let firstKeys = Set(driver.outputs.map(\.dedupeKey))
        let firstFailures = driver.deadLetters.count
        // Every decoding stage rejects the garbage line; pass-through forwards anything.
        if !(stage is PassThroughTransform) { #expect(firstFailures > 0, "the garbage line must fail") }
        let again = driver.redeliver(from: 0)
        for r in again.records {
            #expect(firstKeys.contains(r.dedupeKey), "\(stage.name) produced a new output on redelivery: \(r.dedupeKey)")
        }
        // Failures are deterministic too: the same inputs fail the same way.
        #expect(again.failures == Array(driver.deadLetters.prefix(firstFailures).map(\.failure)))
    }
}

/// Hostile record metadata: extreme timestamps, keys and headers must not trap any stage.
@Suite struct ExtremeInputTests {
    @Test(arguments: TransformCatalog.names)
    func extremeTimestampsNeverCrash(_ name: String) throws {
        let stage = try TransformCatalog().transform(named: name)
        try run(stage)
    }

    private func run<S: Transform>(_ stage: S) throws {
        var driver = TestDriver(stage, partitions: 2)
        let values: [String?] = [
            nil, "", tick(price: 1, at: 253_402_300_799_999), tick(price: 1, at: 1),
            #"{"code":"KRW-BTC","trade_price":1,"signed_change_rate":0,"trade_volume":0,"trade_timestamp":9223372036854775807}"#,
            Fixtures.productPageNew, Fixtures.campaign(end: "9999-12-31T23:59:59"), Fixtures.campaign(end: "0001-01-01T00:00:00"),
            #"{"topic":"t","title":"a","body":"b","dedupe_key":"k"}"#,
        ]
        for t in [Int64.min, -1, 0, Int64.max] {
            for v in values {
                driver.send(key: "\u{0}", value: v, headers: ["user-id": "", "category": "\u{FFFF}"], timestamp: t)
            }
            driver.advance(to: t)
        }
        #expect(driver.delivered.count == 4 * values.count)
    }
}
