import Testing
import Workers
import WorkersTesting

/// `String.dedupeKey` writes the same bytes as building the key with `+=` and `String(n)`.
@Suite struct DedupeKeyTests {
    @Test func writesWhatStringConcatenationWrites() {
        var rng = SplitMix64(seed: 11)
        var numbers: [Int64] = [0, 1, -1, 9, 10, 99, 100, Int64.max, Int64.min, Int64.max - 1, Int64.min + 1]
        for _ in 0..<2000 { numbers.append(Int64(bitPattern: rng.next()) >> Int64.random(in: 0..<63, using: &rng)) }
        // Every digit count's edges: 10^k - 1 and 10^k, both signs.
        var power: Int64 = 1
        for _ in 0...18 {
            numbers += [power - 1, power, -(power - 1), -power]
            if power > Int64.max / 10 { break }
            power *= 10
        }
        for (i, n) in numbers.enumerated() {
            let topic = ["prices.raw", "", "a-very-long-topic-name.with.dots_and_underscores", "토픽"][i % 4]
            let record = InputRecord(value: [], timestamp: 0, origin: RecordOrigin(topic: topic, partition: Int32(truncatingIfNeeded: n), offset: n))
            let key = String.dedupeKey { k in
                k.append("tick:")
                k.append(topic)
                k.append(":")
                k.append(n)
                k.append(":")
                k.appendIdentity(of: record)
                k.append("#")
                k.append(i)
            }
            let expected = "tick:" + topic + ":" + String(n) + ":" + topic + "/" + String(Int32(truncatingIfNeeded: n)) + "/" + String(n) + "#" + String(i)
            #expect(key == expected)
            #expect(record.identity == topic + "/" + String(Int32(truncatingIfNeeded: n)) + "/" + String(n))
        }
    }

    @Test func keysAroundTheStackBufferSizeAreWhole() {
        // The key is written into a 256-byte stack buffer; longer ones are written again into the string.
        for length in 240...270 {
            let topic = String(repeating: "t", count: length - 12)
            let key = String.dedupeKey { k in
                k.append("x:")
                k.append(topic)
                k.append(":")
                k.append(Int64(1_234_567_89))
            }
            #expect(key == "x:" + topic + ":123456789", "length \(length)")
            #expect(key.utf8.count == length)
        }
    }

    @Test func anUpstreamKeyIsTheIdentity() {
        let record = InputRecord(
            value: [], headers: [RecordHeader(OutputRecord.dedupeKeyHeader, "tick:KRW-BTC:1:prices.raw/0/7#0")], timestamp: 0,
            origin: RecordOrigin(topic: "prices.ticks", partition: 3, offset: 12))
        #expect(record.identity == "tick:KRW-BTC:1:prices.raw/0/7#0")
        #expect(String.dedupeKey { $0.append("latest:"); $0.appendIdentity(of: record) } == "latest:tick:KRW-BTC:1:prices.raw/0/7#0")
        #expect(String.dedupeKey { _ in } == "")
    }
}
