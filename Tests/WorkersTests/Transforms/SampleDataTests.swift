import Testing
import Workers

/// The sample streams in `samples/` (upstream formats, written for the project) decode without
/// a single failure, alone and through the apps' whole chains.
@Suite struct SampleDataTests {
    func run(_ app: String, _ stages: [String], advanceTo ticks: [Int64] = []) throws -> (outputs: [String], failures: [String], lines: Int) {
        let lines = try AppFixtures.sampleLines(app)
        var outputs: [String] = []
        var failures: [String] = []
        // Each file is its own stream: a fresh runner per file.
        for file in Set(lines.map(\.file)).sorted() {
            var runner = JSONLinesRunner(runner: try TransformCatalog().runner(for: stages), defaultTopic: file)
            for (f, line) in lines where f == file {
                for out in runner.process(line: line) {
                    if out.hasPrefix(#"{"type":"dead-letter""#) { failures.append("\(file): \(out)") } else { outputs.append(out) }
                }
            }
            for t in ticks { outputs.append(contentsOf: runner.advance(to: t)) }
        }
        return (outputs, failures, lines.count)
    }

    @Test func hangoutSamplesDecodeWithoutFailure() throws {
        let (outputs, failures, lines) = try run("hangouts", ["hangouts.decode"])
        #expect(lines >= 40)
        #expect(failures.isEmpty, "\(failures)")
        #expect(outputs.count >= lines)
    }

    @Test func challengeSamplesDecodeWithoutFailure() throws {
        let (outputs, failures, lines) = try run("challenges", ["challenges.decode"])
        #expect(lines >= 40)
        #expect(failures.isEmpty, "\(failures)")
        #expect(outputs.count >= lines)
    }

    @Test func hangoutChainOverTheSamples() throws {
        // The clock ticks every 10 minutes from 2024-05-08 00:00 KST to 05-13, when every sample hangout is over.
        let ticks = Array(stride(from: Int64(1_715_094_000_000), through: 1_715_526_000_000, by: 600_000))
        let (outputs, failures, _) = try run("hangouts", ["hangouts.decode", "hangouts.notifications", "notifications.render"], advanceTo: ticks)
        #expect(failures.isEmpty, "\(failures)")
        for kind in ["nearby", "joined", "changed", "cancelled", "reminder"] {
            #expect(outputs.contains { $0.contains(#""kind":"\#(kind)""#) }, "no \(kind) push")
        }
    }

    @Test func challengeChainsOverTheSamples() throws {
        // 2024-03-12 00:00 KST: the sample week is over.
        let end: Int64 = 1_710_169_200_000
        let standings = try run("challenges", ["challenges.decode", "challenges.standings"], advanceTo: [end])
        #expect(standings.failures.isEmpty, "\(standings.failures)")
        let results = standings.outputs.filter { $0.contains(#""output":"challenges.results""#) }
        // stream.jsonl holds six challenges of the week (one unmatched); responses.jsonl repeats some.
        #expect(results.count >= 6)
        #expect(results.contains { $0.contains(#""kind":"unmatched""#) })
        #expect(results.contains { $0.contains(#""reason":"gave-up""#) })
        let pushes = try run("challenges", ["challenges.decode", "challenges.notifications", "notifications.render"], advanceTo: [end])
        #expect(pushes.failures.isEmpty, "\(pushes.failures)")
        #expect(pushes.outputs.contains { $0.contains("챌린지 결과") })
        let thumbs = try run("challenges", ["challenges.decode", "challenges.thumbnails"])
        #expect(thumbs.outputs.filter { $0.contains(#""output":"thumbnails.requests""#) }.count >= 40)
    }
}
