import ArgumentParser
import Foundation
import Pipeline
import Kafka
import Operations

@main
struct PipelineCtl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pipelinectl",
        abstract: "Operate the Kafka worker pipeline.",
        discussion: exitCodesHelp,
        subcommands: [Dev.self, Worker.self, ConsoleCommand.self, Produce.self, Ingest.self, Replay.self, DLQ.self, Lag.self, Groups.self, Topics.self,
                      Broker.self, Run.self, Perf.self, Demo.self, Chaos.self]
    )
}

enum Preflight {
    /// Every command that loads librdkafka calls this first.
    static func checkRuntime() throws {
        do {
            try KafkaRuntime.check(environment: ProcessInfo.processInfo.environment)
        } catch {
            throw ValidationError(error.message)
        }
    }
}

/// Runs `body` against the given bootstrap servers, or against an embedded local broker started
/// for the duration of the command.
func withBootstrap<T>(_ servers: [String]?, _ body: ([String]) async throws -> T) async throws -> T {
    if let servers { return try await body(servers) }
    return try await LocalBroker.with { broker in
        FileHandle.standardError.write(Data("started local broker (tansu) at \(broker.bootstrapServers)\n".utf8))
        return try await body([broker.bootstrapServers])
    }
}

func formatRate(_ count: Int, _ duration: Duration) -> String {
    let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    let rate = seconds > 0 ? Double(count) / seconds : 0
    return String(format: "%d messages in %.2f s (%.0f msg/s)", count, seconds, rate)
}
