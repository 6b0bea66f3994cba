import Foundation
import Testing
@testable import Workers
import WorkersTesting

/// The writer's number and key fast paths write exactly what the plain forms did:
/// `String(Int64)` for integers and whole doubles, `Double.description` for the rest (outputs
/// are compared byte for byte by consumers' dedupe and by the golden tests).
@Suite struct JSONWriterTests {
    private func written(_ body: (inout JSONWriter) -> Void) -> String {
        var w = JSONWriter()
        body(&w)
        return String(decoding: w.bytes, as: UTF8.self)
    }

    private func reference(_ v: Double) -> String {
        guard v.isFinite else { return "null" }
        if abs(v) < 1e15, v == Double(Int64(v)) { return String(Int64(v)) }
        return v.description
    }

    @Test func doublesAreWrittenAsDescriptionWritesThem() {
        var rng = SplitMix64(seed: 8)
        var values: [Double] = [
            0.1 + 0.2, 0.001, 0.0009999, 0.0001, 0.00123, 9_999_999.5, 10_000_000.5, 1234.5, 0.0123, 12345.678,
            2.675, 1.005, 100.25, 4_503_599_627_370_495.5, 5e-324, .greatestFiniteMagnitude, .infinity, .nan, 1e15, 1e16,
        ]
        // Prices and volumes: integers with up to 9 decimals, across magnitudes.
        for k in 0...9 {
            let scale = (0..<k).reduce(1.0) { r, _ in r * 10 }
            for _ in 0..<20_000 {
                let n = Double(rng.next() >> (11 + rng.next() % 50))
                values.append(n / scale)
            }
        }
        // Arbitrary doubles around the fast path's range, and their neighbours.
        for _ in 0..<50_000 {
            let v = Double(bitPattern: 0x3F40_0000_0000_0000 + rng.next() % 0x0130_0000_0000_0000)
            values += [v, v.nextUp, v.nextDown]
        }
        var mismatches: [String] = []
        for v in values + values.map({ -$0 }) {
            let got = written { $0.double(v) }
            if got != reference(v), mismatches.count < 10 { mismatches.append("\(v): wrote \(got), expected \(reference(v))") }
        }
        #expect(mismatches.isEmpty, "\(mismatches)")
    }

    @Test func integersAtTheExtremes() {
        for v: Int64 in [0, 7, -7, 10, -10, 1_700_000_000_123, .max, .min, .min + 1] {
            #expect(written { $0.int(v) } == String(v))
        }
        // Every digit count's edges (the count comes from the bit length and one comparison).
        var power: Int64 = 1
        for _ in 0...18 {
            for v in [power - 1, power, power + 1, power * 2 - 1] + (power <= Int64.max / 10 ? [power * 10 - 1] : []) {
                #expect(written { $0.int(v) } == String(v))
                #expect(written { $0.int(-v) } == String(-v))
            }
            if power > Int64.max / 10 { break }
            power *= 10
        }
    }

    /// The writer grows past its initial room, and reading `bytes` midway leaves it writable.
    @Test func growsAndCanBeReadMidway() {
        var w = JSONWriter(capacity: 16)
        var expected = "["
        w.beginArray()
        for i in 0..<1_000 {
            if i == 500 { #expect(String(decoding: w.bytes, as: UTF8.self) == expected) }
            w.string("v\(i)\t"); w.raw(Array("{}".utf8))
            expected += (i == 0 ? "" : ",") + #""v\#(i)\t",{}"#
        }
        w.endArray()
        #expect(String(decoding: w.bytes, as: UTF8.self) == expected + "]")
    }

    @Test func keysAreQuotedAndEscapedInEveryShape() {
        let long = String(repeating: "k", count: 80)
        let json = written { w in
            w.beginObject()
            w.key("a"); w.int(1)
            w.key(""); w.int(2)
            w.key("quote\"back\\slash\nline"); w.int(3)
            w.key(text: long); w.string("v\u{1}")
            w.key("ünï"); w.bool(true)
            w.key(text: "ünï\u{7f}"); w.int(4)
            w.endObject()
        }
        #expect(json == #"{"a":1,"":2,"quote\"back\\slash\nline":3,"\#(long)":"v\u0001","ünï":true,"ünï\#u{7f}":4}"#)
    }

    /// A tick writes all of itself into one reservation (``JSONWriter/withRoom(_:_:)``, which
    /// stops the process if a bound is wrong): every field set, at its longest, and a market
    /// code that needs escaping.
    @Test func aTickAtItsLongestFitsItsRoom() throws {
        let longest = -1.7976931348623157e+308  // `description` is 24 characters
        let tick = PriceTick(
            market: String(repeating: "\"\u{1}", count: 40), tradePrice: longest, openingPrice: longest, highPrice: longest,
            lowPrice: longest, prevClosingPrice: longest, change: .fall, signedChangePrice: longest,
            signedChangeRate: longest, tradeVolume: longest, accTradeVolume24h: longest, accTradePrice24h: longest,
            tradeTimestamp: Int64.min, timestamp: Int64.min, askBid: .bid, streamType: .snapshot, isTradingSuspended: false)
        let text = written { tick.write(to: &$0) }
        #expect(text.contains(#""code":"\"\u0001\"\u0001"#))
        #expect(text.contains(#""trade_timestamp":-9223372036854775808"#))
        #expect(text.hasSuffix(#""stream_type":"SNAPSHOT","is_trading_suspended":false}"#))
        // Twice in one writer, after other values: the room is counted from where the writer is.
        let twice = written { w in w.beginArray(); w.int(1); tick.write(to: &w); tick.write(to: &w); w.endArray() }
        #expect(twice == "[1," + text + "," + text + "]")
        // A usual tick: its room (under 1 KiB) is written on the stack whenever the writer's
        // slack is shorter, then appended; the same bytes either way.
        let usual = PriceTick(
            market: "KRW-BTC", tradePrice: 48_902_450, openingPrice: 48_901_450, change: .rise, signedChangeRate: 0.0123,
            tradeVolume: 6.6e-02, tradeTimestamp: 1_699_967_913_484, askBid: .ask, streamType: .realtime)
        let one = written { usual.write(to: &$0) }
        #expect(one == #"{"type":"ticker","code":"KRW-BTC","trade_price":48902450,"opening_price":48901450,"change":"RISE","signed_change_rate":0.0123,"trade_volume":0.066,"trade_timestamp":1699967913484,"ask_bid":"ASK","stream_type":"REALTIME"}"#)
        let many = written { w in for _ in 0..<50 { usual.write(to: &w); w.int(7) } }
        #expect(many == Array(repeating: one + ",7", count: 50).joined(separator: ","))
    }

    /// The short copies and comparisons keys, enum values and dedupe keys are written and read
    /// with: every length from 0 to past the last special case, at every offset of a word, agree
    /// with a byte loop; a difference at any one byte is found; nothing outside the range is written.
    @Test func shortCopiesAndComparisonsAgreeWithAByteLoop() {
        var rng = SplitMix64(seed: 11)
        let source = (0..<80).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        for n in 0...40 {
            for offset in 0..<8 {
                var target = [UInt8](repeating: 0xEE, count: 96)
                source.withUnsafeBytes { s in
                    target.withUnsafeMutableBytes { t in
                        ShortBytes.copy(from: s.baseAddress! + offset, to: t.baseAddress! + 8, count: n)
                    }
                }
                #expect(Array(target[8..<(8 + n)]) == Array(source[offset..<(offset + n)]), "n \(n) offset \(offset)")
                #expect(target[..<8].allSatisfy { $0 == 0xEE } && target[(8 + n)...].allSatisfy { $0 == 0xEE }, "n \(n)")
                var other = Array(source[offset..<(offset + n)])
                source.withUnsafeBytes { s in
                    other.withUnsafeBytes { o in
                        #expect(ShortBytes.equal(s.baseAddress! + offset, o.baseAddress ?? s.baseAddress!, count: n))
                    }
                }
                for i in 0..<n {
                    other[i] ^= 0x20
                    source.withUnsafeBytes { s in
                        other.withUnsafeBytes { o in
                            #expect(!ShortBytes.equal(s.baseAddress! + offset, o.baseAddress!, count: n), "n \(n) byte \(i)")
                        }
                    }
                    other[i] ^= 0x20
                }
            }
        }
    }

    /// Strings and run-time keys of every size the writer reserves room for differently (its
    /// slack, the stack, a grown buffer), plain and needing escapes, read back by Foundation.
    @Test func stringsOfEverySizeReadBack() throws {
        for n in [0, 1, 20, 21, 40, 127, 128, 170, 171, 1_000, 5_000, 70_000] {
            for text in [String(repeating: "a", count: n), String(repeating: "é\"\n", count: max(1, n / 3))] {
                let json = written { w in
                    w.beginObject(); w.key(text: text); w.string(text); w.key("x"); w.int(1); w.endObject()
                }
                let object = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any]
                #expect(object?[text] as? String == text, "\(n)")
                #expect(object?["x"] as? Int == 1)
            }
        }
    }
}
