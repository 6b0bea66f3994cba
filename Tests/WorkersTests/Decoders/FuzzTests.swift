import Testing
import WorkersTesting
import Workers

/// Garbage at every decoder: mutated real samples (byte flips, truncations, splices, deep
/// nesting) and random bytes. The property is that decoding returns (a value or a failure) and
/// never crashes or hangs; a crash takes the whole test process down, so this test fails loudly.
@Suite struct FuzzTests {
    static let seeds: [String] = [
        Fixtures.upbitDefault, Fixtures.upbitSimple, Fixtures.upbitREST, Fixtures.productPageOld,
        Fixtures.productPageNew, Fixtures.productDetail, "[\(Fixtures.campaign()),\(Fixtures.campaign(id: 7))]",
        #"{"token":"t","title":"a","body":"b","data":{"k":"v"},"collapse_key":"c","dedupe_key":"d"}"#,
    ]

    private func decodeAll(_ bytes: [UInt8]) -> Int {
        var outcomes = 0
        if (try? PriceTickDecoder().decode(bytes)) != nil { outcomes += 1 }
        if (try? ProductDecoder().decode(bytes)) != nil { outcomes += 1 }
        if (try? CampaignDecoder().decode(bytes)) != nil { outcomes += 1 }
        if (try? NotificationDecoder().decode(bytes)) != nil { outcomes += 1 }
        return outcomes
    }

    @Test func mutatedSamplesNeverCrash() {
        var rng = SplitMix64(seed: 0xC0FFEE)
        let alphabet = Array(#"{}[]":,.-+eE0123456789 \nulltruefalse"\u00"#.utf8) + [0x00, 0xFF, 0xC3, 0x80]
        var decodedSomething = 0
        var failed = 0
        for round in 0..<6_000 {
            var bytes = Array(Self.seeds[round % Self.seeds.count].utf8)
            let edits = Int(rng.next() % 6) + 1
            for _ in 0..<edits where !bytes.isEmpty {
                let at = Int(rng.next() % UInt64(bytes.count))
                switch rng.next() % 5 {
                case 0: bytes[at] = alphabet[Int(rng.next() % UInt64(alphabet.count))]
                case 1: bytes.removeSubrange(at...)
                case 2: bytes.insert(alphabet[Int(rng.next() % UInt64(alphabet.count))], at: at)
                case 3: bytes.remove(at: at)
                default:
                    let from = Int(rng.next() % UInt64(bytes.count))
                    let len = min(Int(rng.next() % 40), bytes.count - from)
                    bytes.insert(contentsOf: bytes[from..<(from + len)], at: at)
                }
            }
            let n = decodeAll(bytes)
            decodedSomething += n
            if n == 0 { failed += 1 }
        }
        // Sanity: the mutations really produced both outcomes.
        #expect(decodedSomething > 0)
        #expect(failed > 0)
    }

    @Test func randomBytesAndPathologicalShapesNeverCrash() {
        var rng = SplitMix64(seed: 7)
        for _ in 0..<3_000 {
            let n = Int(rng.next() % 200)
            let bytes = (0..<n).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            // Random bytes are never a valid ticker, product or campaign: accepting one would be a bug.
            #expect(decodeAll(bytes) == 0, "accepted \(bytes)")
        }
        let shapes: [String] = [
            String(repeating: "[", count: 100_000), String(repeating: "{\"a\":", count: 50_000),
            "[" + String(repeating: "1,", count: 20_000) + "1]", "\"" + String(repeating: "\\", count: 10_001),
            String(repeating: "9", count: 5000), "-" + String(repeating: "0", count: 3000) + ".5e99999999999",
            "{\"code\":\"" + String(repeating: "\\ud800", count: 100) + "\"}", "\u{FEFF}{}", "nul", "tru", "[1,]", "{\"a\"}",
        ]
        for shape in shapes {
            #expect(decodeAll(Array(shape.utf8)) == 0, "\(shape.prefix(30))")
        }
    }
}
