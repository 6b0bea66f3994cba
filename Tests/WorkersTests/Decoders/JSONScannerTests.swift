import Testing
import WorkersTesting
@testable import Workers

/// The number parser against the standard library's correctly rounded parser, and the
/// scanner's structural checks, through the price decoder's public surface.
@Suite struct NumberParsingTests {
    private func parse(_ text: String) throws(DecodeFailure) -> Double {
        try JSONScanner.withScanner(Array(text.utf8), limits: .default) { s throws(DecodeFailure) in try s.readDouble() }
    }

    @Test(arguments: [
        "0", "-0", "1", "31883000", "31883000.00000000", "10711749229.465390000000", "8.4e-05", "1.5e+03",
        "1.23123123E8", "0.0126713295", "-0.0036809816", "134056539620.4656", "2117.53740907", "100.5", "1e22",
        "1e23", "123456789012345678901234567890", "0.1", "0.30000000000000004", "2.2250738585072014e-308",
        "4.9e-324", "1.7976931348623157e308", "9007199254740993", "0.000000000000000000000000001",
        "1000000000000000000000.0000000000001", "7.00000000000000000000000000000000000001",
    ])
    func matchesStandardLibrary(_ text: String) throws {
        let v = try parse(text)
        #expect(v == Double(text)!, "parsed \(text) as \(v)")
    }

    @Test func randomDecimalsMatchStandardLibrary() throws {
        var rng = SplitMix64(seed: 42)
        for _ in 0..<20_000 {
            let digits = Int(rng.next() % 20) + 1
            var text = rng.next() % 2 == 0 ? "-" : ""
            let intDigits = Int(rng.next() % UInt64(digits)) + 1
            for i in 0..<digits {
                if i == intDigits { text += "." }
                let d = rng.next() % 10
                text += String(i == 0 && intDigits > 1 && d == 0 ? 1 : d)
            }
            if text.contains("."), rng.next() % 3 == 0 { text += String(repeating: "0", count: Int(rng.next() % 12)) }
            if rng.next() % 3 == 0 { text += "e\(Int(rng.next() % 60) - 30)" }
            let v = try parse(text)
            #expect(v == Double(text)!, "parsed \(text) as \(v)")
        }
    }

    @Test(arguments: ["01", "1.", ".5", "-", "1e", "1e+", "+1", "0x10", "1.2.3", "NaN", "Infinity", "--1", "1e999"])
    func rejectsInvalidNumbers(_ text: String) {
        #expect(throws: DecodeFailure.self) { try parse(text) }
    }

    @Test func integersAcceptIntegralDecimalForms() throws {
        func int(_ t: String) throws(DecodeFailure) -> Int64 {
            try JSONScanner.withScanner(Array(t.utf8), limits: .default) { s throws(DecodeFailure) in try s.readInt() }
        }
        #expect(try int("2000") == 2000)
        #expect(try int("2000.0") == 2000)
        #expect(try int("2.0E3") == 2000)
        #expect(try int("1699931526014") == 1_699_931_526_014)
        #expect(try int("-9223372036854775808") == Int64.min)
        #expect(throws: DecodeFailure.self) { try int("2000.5") }
        #expect(throws: DecodeFailure.self) { try int("9223372036854775808") }
        #expect(throws: DecodeFailure.self) { try int("1e30") }
    }

    @Test func stringsDecodeEscapesAndRejectBadOnes() throws {
        func str(_ t: String) throws(DecodeFailure) -> String {
            try JSONScanner.withScanner(Array(t.utf8), limits: .default) { s throws(DecodeFailure) in try s.readString() }
        }
        #expect(try str(#""a\"b\\c\/d\n\u00e9\ud83d\ude00""#) == "a\"b\\c/d\né😀")
        #expect(try str(#""한글""#) == "한글")
        #expect(throws: DecodeFailure.self) { try str(#""\ud83d""#) }
        #expect(throws: DecodeFailure.self) { try str(#""\x""#) }
        #expect(throws: DecodeFailure.self) { try str("\"a\nb\"") }
        #expect(throws: DecodeFailure.self) { try str("\"abc") }
        #expect(throws: DecodeFailure.self) {
            try JSONScanner.withScanner([0x22, 0xFF, 0xFE, 0x22], limits: .default) { s throws(DecodeFailure) in try s.readString() }
        }
    }

    /// The string scanner reads 8 bytes at a time: put escapes, quotes, control characters and
    /// multi-byte UTF-8 at every offset around the word boundaries.
    @Test func specialBytesAtEveryOffsetOfTheWordScan() throws {
        func str(_ t: String) throws(DecodeFailure) -> String {
            try JSONScanner.withScanner(Array(t.utf8), limits: .default) { s throws(DecodeFailure) in try s.readString() }
        }
        for prefix in 0..<20 {
            let pad = String(repeating: "a", count: prefix)
            #expect(try str("\"\(pad)\"") == pad)
            #expect(try str("\"\(pad)\\\"\(pad)\"") == pad + "\"" + pad)
            #expect(try str("\"\(pad)é한\\n\(pad)\"") == pad + "é한\n" + pad)
            #expect(throws: DecodeFailure.self) { try str("\"\(pad)\u{1}\(pad)\"") }
            #expect(throws: DecodeFailure.self) { try str("\"\(pad)\u{1F}\"") }
            #expect(throws: DecodeFailure.self) { try str("\"\(pad)") }
            // Invalid UTF-8 anywhere in an otherwise ASCII string (the ASCII check reads words too).
            for invalid: [UInt8] in [[0xFF], [0xC3], [0x80], [0xED, 0xA0, 0x80]] {
                let bytes = [0x22] + Array(pad.utf8) + invalid + Array(pad.utf8) + [0x22]
                #expect(throws: DecodeFailure.self) {
                    try JSONScanner.withScanner(bytes, limits: .default) { s throws(DecodeFailure) in try s.readString() }
                }
            }
        }
    }

    @Test func dateTimesParseWithAndWithoutZone() throws {
        func ms(_ t: String, _ offset: Int = 9 * 3600) -> Int64? {
            Array(t.utf8).withUnsafeBytes { LocalDateTime.epochMillis($0, defaultOffsetSeconds: offset) }
        }
        // 2022-01-04T00:00:00 KST is 2022-01-03T15:00:00Z.
        #expect(ms("2022-01-04T00:00:00.00") == 1_641_222_000_000)
        #expect(ms("2022-01-04T00:00:00") == 1_641_222_000_000)
        #expect(ms("2022-01-04T00:00:00", 0) == 1_641_254_400_000)
        #expect(ms("2022-01-03T15:00:00.123Z") == 1_641_222_000_123)
        #expect(ms("2022-01-04T00:00:00.123456+09:00") == 1_641_222_000_123)
        #expect(ms("2022-02-30T00:00:00") == nil)
        #expect(ms("2022-01-04 25:00:00") == nil)
        #expect(ms("2022-01-04T00:00:00.") == nil)
        #expect(ms("2022-01-04") == nil)
        #expect(LocalDateTime.isoUTC(1_641_222_000_123) == "2022-01-03T15:00:00.123Z")
    }
}


/// Key lookup by byte span: the masked-word path (a key inside its JSON text) and the byte path
/// agree for every length, also where the key ends at the last byte of the input.
@Suite struct KeyTableTests {
    @Test func everyLengthIsFoundAndNearMissesAreNot() {
        func name(_ n: Int) -> String {
            var text = ""
            for j in 0..<n { text.append(Character(UnicodeScalar(UInt8(97 + (j * 7 + n) % 26)))) }
            return text
        }
        let names = (0...32).map(name)
        let table = KeyTable(names.enumerated().map { ($1, $0) })
        for (id, name) in names.enumerated() {
            let bytes = Array(name.utf8)
            for trailing in [Array(#"":1}"#.utf8), []] {  // in its JSON text, and at the input's very end
                let text = bytes + trailing
                text.withUnsafeBytes { raw in
                    let base = raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!
                    #expect(table.lookup(base, count: bytes.count, readable: text.count) == id, "\(name) + \(trailing.count)")
                    #expect(table.lookup(UnsafeRawBufferPointer(start: base, count: bytes.count)) == id)
                    // The same bytes one shorter, or with the next byte: other keys (or none), never this one.
                    if bytes.count > 0 { #expect(table.lookup(base, count: bytes.count - 1, readable: text.count) != id) }
                    if trailing.count > 0 { #expect(table.lookup(base, count: bytes.count + 1, readable: text.count) == nil) }
                }
            }
        }
        let long = Array(String(repeating: "k", count: 33).utf8)
        long.withUnsafeBytes { #expect(table.lookup($0.baseAddress!, count: 33, readable: 33) == nil) }
    }
}

extension NumberParsingTests {
    /// Integers in every written form the fast path and the exact path take, against Int64's parser.
    @Test func randomIntegersMatchStandardLibrary() throws {
        func int(_ t: String) throws(DecodeFailure) -> Int64 {
            try JSONScanner.withScanner(Array(t.utf8), limits: .default) { s throws(DecodeFailure) in try s.readInt() }
        }
        var rng = SplitMix64(seed: 7)
        for _ in 0..<20_000 {
            let v = Int64(bitPattern: rng.next()) >> Int64(rng.next() % 64)
            var text = String(v)
            switch rng.next() % 4 {
            case 0: text += "." + String(repeating: "0", count: Int(rng.next() % 8) + 1)  // 2000.000
            case 1: if v != 0 { text += ".5"; #expect(throws: DecodeFailure.self) { try int(text) }; continue }
            default: break
            }
            #expect(try int(text) == v, "\(text)")
        }
    }
}
