import Foundation
import Kafka
import Testing
@testable import Pipeline

/// The default `transactional.id` of an exactly-once worker is stable across a restart on the
/// same host (so the new producer fences its predecessor and aborts what it left open) and unique
/// among the workers running there at once.
@Suite struct TransactionalIDTests {
    @Test func workersRunningAtOnceTakeDifferentSlotsAndTheIDCarriesNoPID() {
        let group = "txn-test-\(UInt64.random(in: 0..<UInt64.max))"
        let first = StageService.defaultTransactionalID(group: group, instance: nil)
        let second = StageService.defaultTransactionalID(group: group, instance: nil)
        let host = ProcessInfo.processInfo.hostName
        #expect(first == "\(group)-\(host)-1")
        #expect(second == "\(group)-\(host)-2", "slot 1 is held by the first worker of this process")
        #expect(!first.contains(String(ProcessInfo.processInfo.processIdentifier)))
        #expect(StageService.defaultTransactionalID(group: group, instance: "pod-3") == "\(group)-pod-3")
    }

    /// A slot whose holder ended is free again: the lock goes with the process (here, with the
    /// file descriptor a child process held).
    @Test func aSlotIsFreeAgainOnceItsHolderEnded() async throws {
        let group = "txn-test-\(UInt64.random(in: 0..<UInt64.max))"
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("pipelinectl-txn-\(group)-1.lock").path
        // Another process holds slot 1 while it runs.
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
        holder.arguments = [path, "-c", "echo locked; read line"]
        let input = Pipe(), output = Pipe()
        holder.standardInput = input
        holder.standardOutput = output
        try holder.run()
        defer { if holder.isRunning { holder.terminate() } }
        // It says so once it has the lock (read off the cooperative pool: the read blocks).
        let reader = output.fileHandleForReading
        let said = String(decoding: await BlockingExecutor.run { reader.availableData }, as: UTF8.self)
        #expect(said.hasPrefix("locked"))
        #expect(TransactionalSlot.take(group: group) == 2, "slot 1 is held by the other process")
        try input.fileHandleForWriting.write(contentsOf: Array("done\n".utf8))
        await BlockingExecutor.run { holder.waitUntilExit() }
        #expect(TransactionalSlot.take(group: group) == 1, "its holder ended: a restarted worker gets it back")
    }
}
