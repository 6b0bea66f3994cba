import Testing
import Workers
import WorkersTesting

@Suite struct JSONLinesRunnerTests {
    func runner(_ names: [String], options: TransformCatalog.Options = .init()) throws -> JSONLinesRunner {
        JSONLinesRunner(runner: try TransformCatalog(options: options).runner(for: names))
    }

    @Test func envelopeAndBareLinesGolden() throws {
        var r = try runner(["prices.decode", "prices.latest"])
        let lines = [
            #"{"topic":"upbit","partition":2,"offset":40,"key":"KRW-BTC","value":{"code":"KRW-BTC","trade_price":1.5e3,"signed_change_rate":0,"trade_volume":2,"trade_timestamp":1000},"headers":{"h":"v"},"timestamp":5}"#,
            "",
            #"{"cd":"KRW-ETH","tp":7,"scr":0.01,"tv":1,"ttms":2000}"#,
            #"{"value":"{\"code\":\"KRW-BTC\",\"trade_price\":\"x\"}","offset":9}"#,
            #"{"value":null,"key":"KRW-BTC"}"#,
        ]
        let out = lines.flatMap { r.process(line: $0) }
        #expect(out == [
            #"{"type":"output","output":"prices.latest","key":"KRW-BTC","value":{"type":"ticker","code":"KRW-BTC","trade_price":1500,"signed_change_rate":0,"trade_volume":2,"trade_timestamp":1000},"headers":{},"dedupe_key":"latest:KRW-BTC:1000:0"}"#,
            #"{"type":"output","output":"prices.latest","key":"KRW-ETH","value":{"type":"ticker","code":"KRW-ETH","trade_price":7,"signed_change_rate":0.01,"trade_volume":1,"trade_timestamp":2000},"headers":{},"dedupe_key":"latest:KRW-ETH:2000:0"}"#,
            #"{"type":"dead-letter","key":null,"value":{"code":"KRW-BTC","trade_price":"x"},"headers":{"dead-letter.stage":"prices.decode,prices.latest","dead-letter.transform":"prices.decode,prices.latest","dead-letter.reason":"wrong-type","dead-letter.field":"trade_price","dead-letter.detail":"expected number, found string","dead-letter.origin.topic":"stdin","dead-letter.origin.partition":"0","dead-letter.origin.offset":"9","dead-letter.attempts":"1"}}"#,
        ])
    }

    @Test func unknownStageNamesItAndListsTheKnownOnes() {
        #expect(throws: TransformCatalog.UnknownTransform(name: "prices.candle")) {
            try TransformCatalog().runner(for: ["prices.decode", "prices.candle"])
        }
        #expect(TransformCatalog.UnknownTransform(name: "x").description.contains("prices.candles"))
    }

    @Test func everyCatalogNameBuildsAndSurvivesGarbage() throws {
        for name in TransformCatalog.names {
            var r = try runner([name])
            #expect(r.runner.name == name)
            for line in ["{", "[1,2]", "null", #"{"value":null}"#, "\u{0}", #"{"value":{"a":[[[[]]]]}}"#] {
                _ = r.process(line: line)
            }
        }
    }

    @Test func advanceFlushesBatches() throws {
        var options = TransformCatalog.Options()
        options.newProductsIntervalMillis = 1000
        var r = try runner(["products.decode", "products.new-notifications", "notifications.render"], options: options)
        #expect(r.process(line: #"{"value":\#(Fixtures.productPageNew),"timestamp":10}"#).isEmpty)
        let out = r.advance(to: 5000)
        #expect(out.count == 1, "a topic's notification: FCM's payload only")
        #expect(out.first?.contains(#""output":"notifications.fcm""#) == true)
    }
}

@Suite struct TestDriverTests {
    @Test func spreadsKeysOverPartitionsWithPerPartitionOffsets() {
        var driver = TestDriver(PriceDecodeTransform(), partitions: 4)
        for i in 0..<40 {
            driver.send(key: "KRW-C\(i % 8)", value: tick("KRW-C\(i % 8)", price: 1, at: Int64(i + 1)), timestamp: Int64(i))
        }
        let byPartition = Dictionary(grouping: driver.delivered, by: \.origin.partition)
        #expect(byPartition.count > 1)
        for (_, records) in byPartition {
            #expect(records.map(\.origin.offset) == Array(0..<Int64(records.count)))
            // One key always lands on one partition.
            for r in records { #expect(byPartition.values.filter { $0.contains { $0.key == r.key } }.count == 1) }
        }
        #expect(driver.outputs.count == 40)
        // Redelivery of the last 10: same dedupe keys as the first time.
        let again = driver.redeliver(from: 30)
        #expect(again.records.map(\.dedupeKey) == driver.outputs[30..<40].map(\.dedupeKey))
    }
}

@Suite struct PassThroughTransformTests {
    @Test func forwardsEverythingUnchangedWithADeterministicDedupeKey() {
        var driver = TestDriver(PassThroughTransform(output: "copy"), partitions: 2)
        driver.send(key: "k", value: "not json at all", headers: ["h": "v"], timestamp: 5)
        driver.send(key: "gone", value: nil, headers: [:], timestamp: 6)
        #expect(driver.outputs.map(\.output) == ["copy", "copy"])
        #expect(driver.outputs[0].valueString == "not json at all")
        #expect(driver.outputs[0].headers == [RecordHeader("h", "v")])
        #expect(driver.outputs[1].value == nil, "a tombstone stays a tombstone")
        #expect(driver.deadLetters.isEmpty)
        let first = driver.outputs.map(\.dedupeKey)
        let again = driver.redeliver(from: 0)
        #expect(again.records.map(\.dedupeKey) == first, "a redelivered record gets the same dedupe key")
    }
}
