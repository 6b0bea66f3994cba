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

    /// A decimal of 1 to `maxDigits` digits, negative half the time, with a point somewhere
    /// unless every digit is before it, and no leading zero.
    private static func randomDecimal(_ rng: inout SplitMix64, upTo maxDigits: UInt64) -> String {
        let digits = Int(rng.next() % maxDigits) + 1
        var text = rng.next() % 2 == 0 ? "-" : ""
        let intDigits = Int(rng.next() % UInt64(digits)) + 1
        for i in 0..<digits {
            if i == intDigits { text += "." }
            let d = rng.next() % 10
            text += String(i == 0 && intDigits > 1 && d == 0 ? 1 : d)
        }
        return text
    }

    @Test func randomDecimalsMatchStandardLibrary() throws {
        var rng = SplitMix64(seed: 42)
        for _ in 0..<20_000 {
            var text = Self.randomDecimal(&rng, upTo: 20)
            if text.contains("."), rng.next() % 3 == 0 { text += String(repeating: "0", count: Int(rng.next() % 12)) }
            if rng.next() % 3 == 0 { text += "e\(Int(rng.next() % 60) - 30)" }
            let v = try parse(text)
            #expect(v == Double(text)!, "parsed \(text) as \(v)")
        }
    }

    /// Numbers inside a message, as the decoders meet them: followed by eight bytes or more, so
    /// that digit runs are read a word at a time, whatever ends them (bytes just below and above
    /// the digits, a byte whose `+6` carries into the next, structure, whitespace). Each reads
    /// as the standard library reads it alone, and the scanner stops right after it.
    @Test func numbersFollowedByMoreBytesMatchStandardLibrary() throws {
        var rng = SplitMix64(seed: 43)
        let ends: [[UInt8]] = [
            Array(#","x":1}"#.utf8), Array("}       ".utf8), Array("]]]]]]]]".utf8), Array("        ".utf8),
            Array("/0000000".utf8), Array(":9999999".utf8), [0xFA, 0x31, 0x31, 0x31, 0x31, 0x31, 0x31, 0x31],
            [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], [0x3A, 0x2F, 0x40, 0x20, 0x0A, 0x7F, 0x80, 0x00],
        ]
        for _ in 0..<20_000 {
            var text = Self.randomDecimal(&rng, upTo: 22)
            let digits = text.filter(\.isNumber).count
            if rng.next() % 4 == 0 {  // `0.` and a fraction, leading zeros included (`0.0123`)
                text = (rng.next() % 2 == 0 ? "-" : "") + "0." + (0..<digits).map { _ in String(rng.next() % 10) }.joined()
            }
            let end = ends[Int(rng.next() % UInt64(ends.count))]
            let bytes = Array(text.utf8) + end
            let (v, stop) = try JSONScanner.withScanner(bytes, limits: .default) { s throws(DecodeFailure) in
                let v = try s.readDouble()
                let stop = s.pos
                s.move(to: s.count)
                return (v, stop)
            }
            #expect(v == Double(text)!, "parsed \(text) + \(end) as \(v)")
            #expect(stop == text.utf8.count, "\(text) + \(end): stopped at \(stop)")
            if !text.contains(".") {
                let i = try JSONScanner.withScanner(bytes, limits: .default) { s throws(DecodeFailure) in
                    let i = try? s.readInt()
                    s.move(to: s.count)
                    return i
                }
                #expect(i == Int64(text), "read \(text) + \(end) as \(String(describing: i))")
            }
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
    /// Both ways of reading a string (a `String`, and text kept in a ``TextBuffer``) see the same.
    @Test func specialBytesAtEveryOffsetOfTheWordScan() throws {
        func str(_ t: String) throws(DecodeFailure) -> String { try str(Array(t.utf8)) }
        func str(_ bytes: [UInt8]) throws(DecodeFailure) -> String {
            let made = try JSONScanner.withScanner(bytes, limits: .default) { s throws(DecodeFailure) in try s.readString() }
            let kept = try JSONScanner.withScanner(bytes, limits: .default) { s throws(DecodeFailure) in
                var text = try s.messageText()
                let slice = try s.readText(into: &text)
                return text.string(slice)
            }
            #expect(kept == made)
            return made
        }
        for prefix in 0..<36 {
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
                #expect(throws: DecodeFailure.self) {
                    try JSONScanner.withScanner(bytes, limits: .default) { s throws(DecodeFailure) in
                        var text = try s.messageText()
                        _ = try s.readText(into: &text)
                    }
                }
            }
            // Non-ASCII bytes read with the closing quote's word are not the string's.
            func asciiFlags(_ json: String) throws(DecodeFailure) -> [Bool] {
                try JSONScanner.withScanner(Array(json.utf8), limits: .default) { s throws(DecodeFailure) in
                    try s.beginArray()
                    var first = true
                    var flags: [Bool] = []
                    while try s.nextElement(&first) { flags.append(try s.readStringSpan().ascii) }
                    return flags
                }
            }
            #expect(try asciiFlags("[\"\(pad)\",\"é\"]") == [true, false])
            #expect(try asciiFlags("[\"\(pad)é\",\"\(pad)\"]") == [false, true])
            #expect(try asciiFlags("[\"\(pad)\\u00e9\"]") == [true])
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

    /// The word-at-a-time check of `yyyy-MM-ddTHH:mm:ss` against a byte-by-byte one: every byte
    /// of the 19 replaced by each of its 256 values is accepted exactly when it is still a date.
    @Test func everyByteOfADateIsChecked() {
        func reference(_ b: [UInt8]) -> Int64? {
            func num(_ from: Int, _ len: Int) -> Int? {
                var v = 0
                for i in from..<(from + len) {
                    guard b[i] >= 0x30, b[i] <= 0x39 else { return nil }
                    v = v * 10 + Int(b[i] - 0x30)
                }
                return v
            }
            guard b[4] == 0x2D, b[7] == 0x2D, b[10] == 0x54 || b[10] == 0x20, b[13] == 0x3A, b[16] == 0x3A,
                let y = num(0, 4), let mo = num(5, 2), let d = num(8, 2), let h = num(11, 2), let mi = num(14, 2),
                let s = num(17, 2), (1...12).contains(mo), d >= 1, d <= LocalDateTime.daysInMonth(y, mo), h < 24, mi < 60, s < 60
            else { return nil }
            return Int64((LocalDateTime.daysFromCivil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s)) * 1000
        }
        for text in ["2022-01-04T00:00:00", "1999-12-31 23:59:59", "2024-02-29T12:34:56"] {
            let valid = Array(text.utf8)
            for i in 0..<valid.count {
                for v in 0...255 {
                    var b = valid
                    b[i] = UInt8(v)
                    let got = b.withUnsafeBytes { LocalDateTime.epochMillis($0, defaultOffsetSeconds: 0) }
                    #expect(got == reference(b), "\(text) byte \(i) = \(v)")
                }
            }
        }
    }
}


/// The UTF-8 check that keeps text without making a `String`, against the standard library's.
@Suite struct UTF8CheckTests {
    @Test func agreesWithTheStandardLibrary() {
        var rng = SplitMix64(seed: 11)
        // Bytes drawn mostly from the edges of the UTF-8 ranges (leads, continuations, overlongs,
        // surrogates, the end of Unicode), with ASCII runs to cross the word-at-a-time path.
        let pool: [UInt8] = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED,
                             0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF]
        for _ in 0..<200_000 {
            var bytes: [UInt8] = []
            for _ in 0..<Int(rng.next() % 12) {
                if rng.next() % 4 == 0 {
                    bytes += Array(repeating: 0x61, count: Int(rng.next() % 10))
                } else {
                    bytes.append(pool[Int(rng.next() % UInt64(pool.count))])
                }
            }
            let expected = String(validating: bytes, as: UTF8.self) != nil
            #expect(bytes.withUnsafeBufferPointer { UTF8Check.isValid($0) } == expected, "\(bytes)")
        }
        for text in ["", "a", "é", "한글", "😀", "aaaaaaaaé😀aaaaaaaa"] {
            #expect(Array(text.utf8).withUnsafeBufferPointer { UTF8Check.isValid($0) })
        }
    }
}

/// Keys read with an expected order give the same fields as keys looked up one by one, whatever
/// the order, with unknown keys, near misses (a prefix, one byte longer), escapes and the input's
/// very end.
@Suite struct ExpectedKeyOrderTests {
    let table = KeyTable(schemes: [
        [("id", 0), ("name", 1), ("skip_me", KeyTable.ignored), ("created_at", 2), ("a_key_of_exactly_thirty_one_byt", 3)],
        [("i", 0), ("n", 1), ("c", 2)],
    ])

    private func fields(_ json: String) throws(DecodeFailure) -> [Int] {
        try JSONScanner.withScanner(Array(json.utf8), limits: .default) { s throws(DecodeFailure) in
            try s.beginObject()
            var expected = table.firstExpected
            var first = true
            var found: [Int] = []
            while let key = try s.nextKey(&first, in: table, expected: &expected) {
                found.append(key.field)
                // The span is the key as written: its text and the table agree.
                #expect(key.field == (Array(s.keyName(key).utf8).withUnsafeBytes { table.lookup($0) } ?? -1))
                try s.skipValue()
            }
            return found
        }
    }

    @Test func orderDoesNotChangeWhatIsFound() throws {
        #expect(try fields(#"{"id":1,"name":"x","created_at":"t"}"#) == [0, 1, 2])
        #expect(try fields(#"{"created_at":"t","id":1,"name":"x"}"#) == [2, 0, 1])
        #expect(try fields(#"{"n":"x","i":1,"c":"t","id":2}"#) == [1, 0, 2, 0])
        #expect(try fields(#"{"id":1,"extra":[1,{"name":2}],"name":"x"}"#) == [0, -1, 1])
        #expect(try fields(#"{"i":1,"idx":1,"nam":2,"name_":3,"name":4}"#) == [0, -1, -1, -1, 1])
        #expect(try fields(#"{"id":1,"n\u0061me":2,"created_at":3}"#) == [0, 1, 2])
        #expect(try fields(#"{"id":1,"name":2,"created_at":3,"a_key_of_exactly_thirty_one_byt":4}"#) == [0, 1, 2, 3])
        #expect(try fields(#"{"id":1,"name":2,"created_at":3,"a_key_of_exactly_thirty_one_bytX":4}"#) == [0, 1, 2, -1])
        #expect(try fields(#"{ "id" : 1 , "name" :2}"#) == [0, 1])
        // A key listed as ignored: no field, and the order stays in step.
        #expect(try fields(#"{"id":1,"name":2,"skip_me":{"id":3},"created_at":4}"#) == [0, 1, -1, 2])
        #expect(try fields(#"{"skip_me":1,"id":2}"#) == [-1, 0])
        // Keys left out: found a few entries further on, or hashed when further than that.
        #expect(try fields(#"{"id":1,"created_at":2}"#) == [0, 2])
        #expect(try fields(#"{"id":1,"a_key_of_exactly_thirty_one_byt":2,"name":3}"#) == [0, 3, 1])
        #expect(try fields(#"{"i":1,"c":2,"n":3}"#) == [0, 2, 1])
        // The expected key at the input's very end (too few bytes left for a word): read the slow way.
        #expect(try fields(#"{"id":1,"name":{}}"#) == [0, 1])
        #expect(try fields(#"{"i":{}}"#) == [0])
        #expect(throws: DecodeFailure.self) { try fields(#"{"id" 1}"#) }
        #expect(throws: DecodeFailure.self) { try fields(#"{"id":1"name":2}"#) }
    }
}

/// Two names in a row for one field (`code` and `market`) are alternatives: after the first,
/// the key expected next is the one after both, so a frame with `code` stays on the fast path.
@Suite struct AlternativeKeyNameTests {
    let table = KeyTable(schemes: [[("type", 0), ("code", 1), ("market", 1), ("price", 2), ("volume", 3)]])

    /// Each key's field and the entry expected after it.
    private func walk(_ json: String) throws(DecodeFailure) -> [(field: Int, expected: Int)] {
        try JSONScanner.withScanner(Array(json.utf8), limits: .default) { s throws(DecodeFailure) in
            try s.beginObject()
            var expected = table.firstExpected
            var first = true
            var steps: [(field: Int, expected: Int)] = []
            while let key = try s.nextKey(&first, in: table, expected: &expected) {
                steps.append((key.field, expected))
                try s.skipValue()
            }
            return steps
        }
    }

    @Test func eitherNameExpectsTheKeyAfterBoth() throws {
        // Entries: type 0, code 1, market 2, price 3, volume 4.
        let code = try walk(#"{"type":"t","code":"KRW-BTC","price":1,"volume":2}"#)
        #expect(code.map(\.field) == [0, 1, 2, 3])
        #expect(code.map(\.expected) == [1, 3, 4, -1])
        let market = try walk(#"{"market":"KRW-BTC","price":1}"#)
        #expect(market.map(\.field) == [1, 2])
        #expect(market.map(\.expected) == [3, 4])
        // Both names (a repeated field): each is still found.
        #expect(try walk(#"{"code":"A-B","market":"A-B","price":1}"#).map(\.field) == [1, 1, 2])
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
