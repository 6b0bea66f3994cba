import ArgumentParser
import Foundation
import Pipeline
import Kafka
import Operations

/// Runs the local broker in the foreground until interrupted.
struct Broker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the local broker (tansu) on a free loopback port until Ctrl-C.")

    enum StorageChoice: String, ExpressibleByArgument, CaseIterable { case memory, s3 }

    @Option(help: "Storage: memory, or s3 (a local moto_server; survives broker restarts).") var storage: StorageChoice = .memory

    func run() async throws {
        let broker = try await LocalBroker.start(LocalBroker.Options(storage: storage == .s3 ? .s3 : .memory))
        print("bootstrap server: \(broker.bootstrapServers)")
        fflush(nil)  // scripts wait for this line; flush it now
        await waitForTerminationSignal()
        await broker.stop()
        print("stopped")
    }
}

/// Returns on SIGINT or SIGTERM.
func waitForTerminationSignal() async {
    signal(SIGINT, SIG_IGN)
    signal(SIGTERM, SIG_IGN)
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        let queue = DispatchQueue(label: "signals")
        let once = OnceFlag()
        for sig in [SIGINT, SIGTERM] {
            let source = DispatchSource.makeSignalSource(signal: sig, queue: queue)
            source.setEventHandler { if once.set() { continuation.resume() } }
            source.resume()
            // Sources live for the rest of the process.
            _ = Unmanaged.passRetained(source as AnyObject)
        }
    }
}

final class OnceFlag: @unchecked Sendable {  // only touched on one serial queue
    private var done = false
    func set() -> Bool {
        if done { return false }
        done = true
        return true
    }
}
