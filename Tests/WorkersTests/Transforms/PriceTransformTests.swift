import Foundation
import PropertyBased
import Testing
@testable import Workers
import WorkersTesting

/// A minimal DEFAULT-format tick.
func tick(_ market: String = "KRW-BTC", price: Double, volume: Double = 1, at t: Int64, rate: Double = 0, ts: Int64? = nil) -> String {
    #"{"type":"ticker","code":"\#(market)","trade_price":\#(price),"signed_change_rate":\#(rate),"trade_volume":\#(volume),"trade_timestamp":\#(t),"timestamp":\#(ts ?? t)}"#
}

/// 2023-11-14T03:12:00Z
let minute0: Int64 = 1_699_931_520_000

@Suite struct PriceTransformTests {
    @Test func decodeStageGolden() {
        var driver = TestDriver(PriceDecodeTransform(), topic: "upbit.ticker", partitions: 1)
        let out = driver.send(key: "KRW-XRP", value: Fixtures.upbitSimple, timestamp: 1)
        #expect(out.failures.isEmpty)
        #expect(out.records.map(\.output) == ["prices.ticks"])
        #expect(out.records.first?.keyString == "KRW-XRP")
        #expect(out.records.first?.valueString == """
            {"type":"ticker","code":"KRW-XRP","trade_price":812,"opening_price":815,"high_price":820,"low_price":810,\
            "prev_closing_price":815,"change":"FALL","signed_change_price":-3,"signed_change_rate":-0.0036809816,\
            "trade_volume":1500,"acc_trade_volume_24h":2000.25,"acc_trade_price_24h":1624000,"trade_timestamp":1700000000123,\
            "timestamp":1700000000150,"ask_bid":"ASK","stream_type":"SNAPSHOT","is_trading_suspended":false}
            """)
        #expect(out.records.first?.dedupeKey == "tick:KRW-XRP:1700000000123:upbit.ticker/0/0#0")
    }

    /// The output key is the market whatever the input's key (the input's key is shared only when it is the market).
    @Test func decodeStageKeysOutputsByMarket() {
        var driver = TestDriver(PriceDecodeTransform(), topic: "upbit.ticker", partitions: 1)
        for inputKey: String? in ["KRW-XRP", "KRW-XRPX", "KRW-XRQ", "", nil] {
            let out = driver.send(key: inputKey, value: Fixtures.upbitSimple, timestamp: 1)
            #expect(out.records.map(\.keyString) == ["KRW-XRP"], "input key \(String(describing: inputKey))")
        }
    }

    @Test func decodeStageSendsGarbageToDeadLettersAndIgnoresTombstones() {
        var driver = TestDriver(PriceDecodeTransform(), topic: "upbit.ticker", partitions: 2)
        driver.send(key: "k", value: #"{"code":"KRW-BTC","trade_price":"#, timestamp: 1, partition: 1)
        driver.send(key: "k", value: nil, timestamp: 2, partition: 1)
        #expect(driver.outputs.isEmpty)
        #expect(driver.deadLetters.count == 1)
        #expect(driver.deadLetters.first?.origin == RecordOrigin(topic: "upbit.ticker", partition: 1, offset: 0))
        #expect(driver.deadLetters.first?.failure.reason == .malformedJSON)
        #expect(driver.deadLetters.first?.failure.field == "trade_price")
    }

    @Test func latestKeepsTheNewestTickPerMarketAndIgnoresOldAndRepeated() {
        var driver = TestDriver(LatestTickerTransform())
        driver.send(key: "KRW-BTC", value: tick(price: 10, at: 2000), timestamp: 1)
        driver.send(key: "KRW-BTC", value: tick(price: 9, at: 1000), timestamp: 2)  // older: ignored
        driver.send(key: "KRW-ETH", value: tick("KRW-ETH", price: 5, at: 1500), timestamp: 3)
        driver.send(key: "KRW-BTC", value: tick(price: 11, at: 3000), timestamp: 4)
        #expect(driver.redeliver(from: 0).records.isEmpty)
        #expect(driver.outputs.map(\.dedupeKey) == ["latest:KRW-BTC:2000:2000", "latest:KRW-ETH:1500:1500", "latest:KRW-BTC:3000:3000"])
    }

    @Test func candlesCloseAfterLatenessFoldLateTicksAndDropTooLateOnes() throws {
        var driver = TestDriver(PriceDecodeTransform().then(CandleTransform(allowedLatenessMillis: 10_000)), partitions: 1)
        driver.send(value: tick(price: 100, volume: 1, at: minute0 + 1_000), timestamp: 1)
        driver.send(value: tick(price: 120, volume: 2, at: minute0 + 30_000), timestamp: 2)
        driver.send(value: tick(price: 90, volume: 1, at: minute0 + 59_000), timestamp: 3)
        // Next minute starts; minute 0 is not closed yet (lateness 10 s).
        driver.send(value: tick(price: 95, volume: 1, at: minute0 + 65_000), timestamp: 4)
        #expect(driver.outputs.isEmpty)
        // A late tick for minute 0 within the lateness corrects it.
        driver.send(value: tick(price: 130, volume: 0.5, at: minute0 + 20_000), timestamp: 5)
        // Watermark passes minute 0 + 60 s + 10 s: minute 0 is published.
        driver.send(value: tick(price: 96, volume: 1, at: minute0 + 70_000), timestamp: 6)
        // Too late now: dropped and counted.
        driver.send(value: tick(price: 500, volume: 9, at: minute0 + 50_000), timestamp: 7)

        let candles = driver.outputs(named: "prices.candles.1m")
        #expect(candles.count == 1)
        #expect(candles.first?.keyString == "KRW-BTC|2023-11-14T03:12")
        #expect(candles.first?.valueString == """
            {"market":"KRW-BTC","candle_date_time_utc":"2023-11-14T03:12:00","opening_price":100,"high_price":130,\
            "low_price":90,"trade_price":90,"timestamp":1699931579000,"candle_acc_trade_price":495,\
            "candle_acc_trade_volume":4.5,"unit":1}
            """)
        #expect(driver.state.second.droppedLate == 1)
        // Redelivering everything changes nothing already published and adds no volume.
        let again = driver.redeliver(from: 0)
        #expect(again.records.isEmpty)
        #expect(driver.state.second.open["KRW-BTC"]?[minute0 + 60_000]?.candle.accTradeVolume == 2)
    }

    @Test func candlesAreCheckpointable() throws {
        var driver = TestDriver(CandleTransform())
        driver.send(value: tick(price: 100, at: minute0 + 1_000), timestamp: 1)
        let data = try JSONEncoder().encode(driver.state)
        let restored = try JSONDecoder().decode(CandleTransform.State.self, from: data)
        #expect(restored == driver.state)
    }

    /// Property: whatever the ticks and their order, every candle has low <= open, close <= high,
    /// and published plus open candles hold exactly the volume of the ticks not dropped as late.
    @Test func candleInvariantsHoldForRandomTickStreams() async {
        let gen = zip(Gen.int(in: 0...300_000), Gen.int(in: 1...10_000), Gen.int(in: 1...1_000)).array(of: 1...60)
        await propertyCheck(count: 200, input: gen) { raw in
            let stage = CandleTransform(allowedLatenessMillis: 10_000)
            var state = stage.initialState
            var published: [Candle] = []
            var seen = Set<String>()
            var acceptedVolume = 0.0
            for (offset, price, volume) in raw {
                let t = PriceTick(
                    market: "KRW-BTC", tradePrice: Double(price), signedChangeRate: 0, tradeVolume: Double(volume) / 100,
                    tradeTimestamp: minute0 + Int64(offset))
                let dropped = state.droppedLate
                let duplicate = !seen.insert("\(offset)|\(price)|\(volume)").inserted
                stage.add(t, to: &state)
                if state.droppedLate == dropped && !duplicate { acceptedVolume += t.tradeVolume }
                for r in stage.closeReady(&state) {
                    guard let v = r.value, let c = try? JSONDecoder().decode(CandleJSON.self, from: Data(v)) else {
                        Issue.record("unreadable candle output")
                        continue
                    }
                    published.append(c.candle)
                }
            }
            let open = state.open.values.flatMap { $0.values.map(\.candle) }
            for c in published + open {
                #expect(c.low <= c.open && c.open <= c.high)
                #expect(c.low <= c.close && c.close <= c.high)
            }
            let total = (published + open).reduce(0) { $0 + $1.accTradeVolume }
            #expect(abs(total - acceptedVolume) < 1e-6)
        }
    }

    /// Property: the close check that skips the scan while no candle can close (`nextCloseAt`)
    /// emits exactly what scanning every open candle on every tick emits, and leaves the same
    /// state, across markets, late and repeated ticks and states read back from a checkpoint.
    @Test func closingOnlyWhenACandleMayCloseEmitsWhatScanningEveryTimeDoes() async {
        let gen = zip(Gen.int(in: 0...3), Gen.int(in: -30_000...400_000), Gen.int(in: 1...3)).array(of: 1...80)
        await propertyCheck(count: 200, input: gen) { raw in
            let stage = CandleTransform(allowedLatenessMillis: 10_000)
            var skipping = stage.initialState
            var scanning = stage.initialState
            var clock: Int64 = 0
            for (i, (market, jitter, price)) in raw.enumerated() {
                clock += 2_000
                let t = PriceTick(
                    market: "KRW-C\(market)", tradePrice: Double(price), signedChangeRate: 0, tradeVolume: 1,
                    tradeTimestamp: minute0 + clock + Int64(jitter) - 30_000)
                stage.add(t, to: &skipping)
                stage.add(t, to: &scanning)
                scanning.nextCloseAt = .min  // as if nothing were known: every candle looked at
                #expect(stage.closeReady(&skipping).map(\.dedupeKey) == stage.closeReady(&scanning).map(\.dedupeKey))
                #expect(skipping == scanning)
                if i % 17 == 16, let data = try? JSONEncoder().encode(skipping) {
                    skipping = (try? JSONDecoder().decode(CandleTransform.State.self, from: data)) ?? skipping
                }
            }
        }
    }

    @Test func alertsFireOncePerCrossing() {
        let stage = WatchlistAlertTransform(subscriptions: [
            .init(subscriber: "tok-1", market: "KRW-BTC", threshold: 0.05),
            .init(subscriber: "tok-2", market: "KRW-BTC", threshold: -0.03),
        ])
        var driver = TestDriver(stage)
        let rates = [0.01, 0.06, 0.07, 0.02, 0.051, -0.04, -0.05]
        for (i, rate) in rates.enumerated() {
            driver.send(key: "KRW-BTC", value: tick(price: 100, at: 1_000 + Int64(i), rate: rate), timestamp: Int64(i))
        }
        #expect(driver.outputs.map(\.dedupeKey) == [
            "alert:tok-1|KRW-BTC|0.05:1001", "alert:tok-1|KRW-BTC|0.05:1004", "alert:tok-2|KRW-BTC|-0.03:1005",
        ])
        #expect(driver.redeliver(from: 0).records.isEmpty)
        #expect(driver.outputs.first?.valueString == """
            {"token":"tok-1","title":"KRW-BTC +6.00%","body":"KRW-BTC is at 100, +6.00% today (your alert: +5.00%).",\
            "data":{"kind":"price-alert","market":"KRW-BTC"},"collapse_key":"price-alert-KRW-BTC",\
            "dedupe_key":"alert:tok-1|KRW-BTC|0.05:1001"}
            """)
    }
}

/// Reads a published candle back (test-only; the runtime never needs to).
struct CandleJSON: Decodable {
    let candle: Candle
    enum K: String, CodingKey {
        case market, opening_price, high_price, low_price, trade_price, timestamp, candle_acc_trade_price, candle_acc_trade_volume
    }
    init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: K.self)
        candle = Candle(
            market: try c.decode(String.self, forKey: .market), minuteStart: 0,
            open: try c.decode(Double.self, forKey: .opening_price), high: try c.decode(Double.self, forKey: .high_price),
            low: try c.decode(Double.self, forKey: .low_price), close: try c.decode(Double.self, forKey: .trade_price),
            accTradePrice: try c.decode(Double.self, forKey: .candle_acc_trade_price),
            accTradeVolume: try c.decode(Double.self, forKey: .candle_acc_trade_volume),
            lastTradeTimestamp: try c.decode(Int64.self, forKey: .timestamp), firstTradeTimestamp: 0, tickCount: 0)
    }
}
