import ArgumentParser
import Foundation
import Pipeline

@main
struct PipelineCtl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pipelinectl",
        abstract: "Operate the Kafka worker pipeline.",
        subcommands: [Dev.self, Demo.self, Worker.self, Broker.self, Topics.self, Perf.self, Run.self]
    )
}

/// Options every command that talks to Kafka shares.
struct ConnectionOptions: ParsableArguments {
    @Option(name: .customLong("bootstrap-server"), help: "Kafka bootstrap servers, host:port[,host:port]. Default: start an embedded local broker.")
    var bootstrapServer: String?

    var servers: [String]? { bootstrapServer.map(parseServers) }

    func validate() throws {
        if let bootstrapServer { try validateServers(bootstrapServer) }
    }
}

/// `--bootstrap-server` for commands that need an existing cluster.
struct RequiredConnection: ParsableArguments {
    @Option(name: .customLong("bootstrap-server"), help: "Kafka bootstrap servers, host:port[,host:port].")
    var bootstrapServer: String

    var servers: [String] { parseServers(bootstrapServer) }

    func validate() throws { try validateServers(bootstrapServer) }
}

func parseServers(_ list: String) -> [String] {
    list.split(separator: ",").map { String($0.trimmingCharacters(in: .whitespaces)) }
}

func validateServers(_ list: String) throws {
    for server in parseServers(list) where !server.contains(":") || server.hasSuffix(":") {
        throw ValidationError("--bootstrap-server: '\(server)' is not host:port")
    }
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
