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

    /// `dedupe-key: content`: FNV-1a 128 over the key's and the value's lengths and bytes, as
    /// docs/guarantees.md defines it. The expected keys were computed from that definition with
    /// Python's integers (`h ^= b; h = h * (2**88 + 0x13b) % 2**128` from 0x6c62…c58d).
    @Test func contentKeysAreTheDocumentedHash() {
        #expect(OutputRecord.contentDedupeKey(key: nil, value: nil) == "content:1f1206bf386598cfecc541ed53713e45")
        #expect(OutputRecord.contentDedupeKey(key: [], value: [][...]) == "content:9d30c1f78465995be47dda5e4e4e77ed")
        let tick = Array(#"{"market":"KRW-BTC","price":1}"#.utf8)
        #expect(OutputRecord.contentDedupeKey(key: Array("KRW-BTC".utf8), value: tick[...]) == "content:52e5fe268da43fd14e2d6cc25845aaee")
        var other = tick
        other[other.count - 2] = UInt8(ascii: "2")
        #expect(OutputRecord.contentDedupeKey(key: Array("KRW-BTC".utf8), value: other[...]) == "content:52e5fe288da43fd14e2d6cc258469d55")
        // The lengths keep where the key ends: "ab"+"c" is not "a"+"bc".
        #expect(OutputRecord.contentDedupeKey(key: Array("ab".utf8), value: Array("c".utf8)[...]) == "content:d8555b420b6e0f8c478bf03049982a28")
        #expect(OutputRecord.contentDedupeKey(key: Array("a".utf8), value: Array("bc".utf8)[...]) == "content:d0d83febed6e0f93b4728c25761cee30")
        // A slice of a larger buffer (how the runtime hands out values) hashes as its own bytes.
        let buffer = Array("xx".utf8) + tick + Array("yy".utf8)
        #expect(OutputRecord.contentDedupeKey(key: Array("KRW-BTC".utf8), value: buffer[2..<(2 + tick.count)]) == "content:52e5fe268da43fd14e2d6cc25845aaee")
    }

    /// An input from a topic identified by content: its identity is its content's key, whatever
    /// its offset (a repeat at another offset is the same input) and any header it carries.
    @Test func anInputIdentifiedByContentIsItsContentKey() {
        let tick = Array(#"{"market":"KRW-BTC","price":1}"#.utf8)
        func input(offset: Int64, headers: [RecordHeader] = []) -> InputRecord {
            InputRecord(
                key: Array("KRW-BTC".utf8), sharing: tick[...], headers: headers, timestamp: 0,
                origin: RecordOrigin(topic: "prices.ticks", partition: 1, offset: offset), identifiedByContent: true)
        }
        #expect(input(offset: 5).identity == "content:52e5fe268da43fd14e2d6cc25845aaee")
        #expect(input(offset: 9, headers: [RecordHeader(OutputRecord.dedupeKeyHeader, "other")]).identity == input(offset: 5).identity)
        #expect(String.dedupeKey { $0.append("a:"); $0.appendIdentity(of: input(offset: 7)) } == "a:content:52e5fe268da43fd14e2d6cc25845aaee")
        var byOffset = input(offset: 5)
        byOffset.identifiedByContent = false
        #expect(byOffset.identity == "prices.ticks/1/5")
    }
}
