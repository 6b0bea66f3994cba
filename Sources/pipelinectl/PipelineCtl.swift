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

/// Options every command that talks to Kafka shares.
struct ConnectionOptions: ParsableArguments {
    @Option(name: .customLong("bootstrap-server"), help: "Kafka bootstrap servers, host:port[,host:port]. Default: start an embedded local broker.")
    var bootstrapServer: String?

    var servers: [String]? { bootstrapServer.map(parseServers) }

    func validate() throws {
        if let bootstrapServer { try validateServers(bootstrapServer) }
    }
}

/// `--bootstrap-server` (or `KAFKA_BOOTSTRAP_SERVERS`) for commands that need an existing cluster.
struct RequiredConnection: ParsableArguments {
    @Option(name: .customLong("bootstrap-server"), help: "Kafka bootstrap servers, host:port[,host:port] (default: $KAFKA_BOOTSTRAP_SERVERS).")
    var bootstrapServer: String?

    /// The flag, else the environment; `validate()` made sure one of them is there.
    var servers: [String] { parseServers(bootstrapServer ?? Self.environment ?? "") }

    static var environment: String? {
        ProcessInfo.processInfo.environment["KAFKA_BOOTSTRAP_SERVERS"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// SASL/SSL, the same flags as `pipelinectl worker` (the password from $KAFKA_SASL_PASSWORD or a file).
    @OptionGroup var security: SecurityOptions

    func validate() throws {
        _ = try security.configuration()
        guard let list = bootstrapServer ?? Self.environment else {
            throw ValidationError("--bootstrap-server is required: pass --bootstrap-server host:port or set KAFKA_BOOTSTRAP_SERVERS")
        }
        if bootstrapServer == nil {
            do { try validateServers(list) } catch { throw ValidationError("KAFKA_BOOTSTRAP_SERVERS: '\(list)' is not host:port[,host:port]") }
        } else {
            try validateServers(list)
        }
    }

    /// The connection: servers and security. `validate()` has checked the security settings, so
    /// reading them again here cannot fail (plaintext is only the unreachable fallback).
    var kafka: KafkaConfiguration {
        var k = KafkaConfiguration(bootstrapServers: servers)
        k.security = (try? security.configuration()) ?? .plaintext
        return k
    }
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
