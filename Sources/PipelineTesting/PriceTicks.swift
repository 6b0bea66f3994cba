import Kafka
import Workers

/// Upbit ticker records for tests of the candle stage, and what an uninterrupted run makes of them.
public enum PriceTicks {
    public static let markets = (0..<24).map { "KRW-C\($0)" }
    public static let base: Int64 = 1_700_000_000_000

    /// Tick `i`: market `i % 24`, trade time advancing 90 ms per tick (so 50,000 ticks span
    /// about 75 minutes of candles), keyed by market.
    public static func tick(_ i: Int, topic: String = "prices.raw") -> ProducerRecord {
        let market = markets[i % markets.count]
        let t = base + Int64(i) * 90
        let price = 1000.0 + Double((i * 7919) % 500)
        let json = """
            {"type":"ticker","code":"\(market)","trade_price":\(price),"trade_volume":\(1 + i % 5),"signed_change_rate":0.01,\
            "trade_timestamp":\(t),"timestamp":\(t + 5),"stream_type":"REALTIME"}
            """
        return ProducerRecord(topic: topic, key: Array(market.utf8), value: Array(json.utf8), timestamp: t)
    }

    /// The dedupe keys a consumer derives (`dedupe-key: content`) from what one uninterrupted
    /// `prices.decode` run makes of `records`, in order.
    public static func decodedContentKeys(_ records: [ProducerRecord]) -> [String] {
        var out = TransformOutput()
        var state = NoState()
        for (i, r) in records.enumerated() {
            let input = InputRecord(key: r.key, value: r.value, timestamp: r.timestamp ?? 0, origin: RecordOrigin(topic: "prices.raw", partition: 0, offset: Int64(i)))
            PriceDecodeTransform().process(input, state: &state, context: TransformContext(now: input.timestamp), into: &out)
        }
        return out.records.map { OutputRecord.contentDedupeKey(key: $0.key, value: $0.value?[...]) }
    }

    /// A consumed record's content dedupe key.
    public static func contentKey(_ r: ConsumerRecord) -> String { OutputRecord.contentDedupeKey(key: r.key, value: r.value?[...]) }

    /// Ticks with every 20th one garbage (5 %), each with an `input-id` header.
    public static func ticksWithGarbage(_ count: Int) -> [ProducerRecord] {
        (0..<count).map { i -> ProducerRecord in
            var r = tick(i)
            if i % 20 == 7 { r.value = Array("{\"code\":\"KRW-C1\",\"trade_price\":\"garbage \(i)\"".utf8) }
            r.headers = [KafkaHeader(key: "input-id", string: String(i))]
            return r
        }
    }

    /// What a single uninterrupted run computes: `stages` over each partition's inputs in offset
    /// order, as output value by dedupe key.
    public static func reference(
        inputs: [(record: ProducerRecord, report: DeliveryReport)], stages: [String], options: TransformCatalog.Options = .init()
    ) throws -> [String: [UInt8]] {
        var byPartition: [Int32: [(Int64, ProducerRecord)]] = [:]
        for (record, report) in inputs { byPartition[report.partition, default: []].append((report.offset, record)) }
        var out: [String: [UInt8]] = [:]
        for (partition, records) in byPartition {
            var runner = try TransformCatalog(options: options).runner(for: stages)
            for (offset, r) in records.sorted(by: { $0.0 < $1.0 }) {
                let input = InputRecord(
                    key: r.key, value: r.value, headers: [], timestamp: r.timestamp ?? 0,
                    origin: RecordOrigin(topic: r.topic, partition: partition, offset: offset))
                for o in runner.process(input, context: TransformContext(now: input.timestamp)).records { out[o.dedupeKey] = o.value }
            }
        }
        return out
    }
}
