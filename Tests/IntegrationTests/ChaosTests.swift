import Foundation
import Testing
import Operations

/// The chaos verifier's CI profile (`pipelinectl chaos --profile ci`), as a separate process: its
/// fixed seeds on librdkafka's mock cluster (kills at any moment, zombies, joins and leaves,
/// failing output deliveries) and on the local broker (broker restarts, zombies). Its report is
/// printed; any violation, or a wedged broker, fails the test. `scripts/chaos` runs the long
/// profile and any other seed.
@Suite(.serialized, .timeLimit(.minutes(10))) struct ChaosTests {
    @Test func theCIProfilePasses() async throws {
        let chaos = try ManagedProcess.launch(try WorkerProcessTests.pipelinectl(), arguments: ["chaos", "--profile", "ci"], environment: [:])
        let status = await chaos.waitForExit()
        let report = chaos.output().split(separator: "\n").filter { $0.hasPrefix("==") || $0.hasPrefix("   ") }.joined(separator: "\n")
        print("chaos report:\n\(report)")
        #expect(status == 0, "pipelinectl chaos --profile ci exited \(status):\n\(chaos.recentOutput(lines: 80))")
        #expect(report.components(separatedBy: "PASS (").count - 1 == 3, "three runs passed")
    }
}
