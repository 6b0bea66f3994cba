import ArgumentParser
import Foundation
import Kafka

/// Where a command finds Kafka when `--bootstrap-server` is not given.
protocol BootstrapFallback {
    /// The flag's help.
    static var help: String { get }
    /// Whether `$KAFKA_BOOTSTRAP_SERVERS` stands in for the flag.
    static var readsEnvironment: Bool { get }
    /// Whether the flag (or the environment) must be there when the arguments are parsed.
    static var required: Bool { get }
}

/// Operator commands and workers: an existing cluster, from the flag or `$KAFKA_BOOTSTRAP_SERVERS`.
enum ExistingCluster: BootstrapFallback {
    static let help = "Kafka bootstrap servers, host:port[,host:port] (default: $KAFKA_BOOTSTRAP_SERVERS)."
    static let readsEnvironment = true
    static let required = true
}

/// Like ``ExistingCluster``, needed only when the command talks to Kafka (`produce --dry-run` does not).
enum ExistingClusterWhenUsed: BootstrapFallback {
    static let help = ExistingCluster.help
    static let readsEnvironment = true
    static let required = false
}

/// `dev`, `demo`, `chaos`: without the flag they start a broker of their own.
enum EmbeddedBroker: BootstrapFallback {
    static let help = "Kafka bootstrap servers, host:port[,host:port]. Default: start an embedded local broker."
    static let readsEnvironment = false
    static let required = false
}

/// `--bootstrap-server`: the one declaration of the flag; `Fallback` says what its absence means.
struct BootstrapServer<Fallback: BootstrapFallback>: ParsableArguments {
    @Option(name: .customLong("bootstrap-server"), help: ArgumentHelp(Fallback.help))
    var flag: String?

    static var environment: String? {
        ProcessInfo.processInfo.environment["KAFKA_BOOTSTRAP_SERVERS"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// The flag, else (where the fallback reads it) the environment.
    var list: String? { flag ?? (Fallback.readsEnvironment ? Self.environment : nil) }

    /// The servers, or nil when neither the flag nor the environment names any.
    var servers: [String]? { list.map(parseServers) }

    func validate() throws {
        if let flag {
            try validateServers(flag)
        } else if let list {
            do { try validateServers(list) } catch { throw ValidationError("KAFKA_BOOTSTRAP_SERVERS: '\(list)' is not host:port[,host:port]") }
        } else if Fallback.required {
            throw Self.missing
        }
    }

    /// The servers, or the error that says how to give them.
    func required() throws -> [String] {
        guard let servers else { throw Self.missing }
        return servers
    }

    static var missing: ValidationError {
        ValidationError("--bootstrap-server is required: pass --bootstrap-server host:port or set KAFKA_BOOTSTRAP_SERVERS")
    }
}

/// The servers and the SASL/SSL settings of an existing cluster.
struct ClusterConnection<Fallback: BootstrapFallback>: ParsableArguments {
    @OptionGroup var server: BootstrapServer<Fallback>
    /// SASL/SSL (the password from $KAFKA_SASL_PASSWORD or a file).
    @OptionGroup var security: SecurityOptions

    func validate() throws {
        _ = try security.configuration()
    }

    /// The connection; throws when no server was given (only possible where the fallback does not require one).
    func configuration() throws -> KafkaConfiguration {
        var kafka = KafkaConfiguration(bootstrapServers: try server.required())
        kafka.security = try security.configuration()
        return kafka
    }
}

/// Commands that always talk to an existing cluster.
typealias RequiredConnection = ClusterConnection<ExistingCluster>

extension ClusterConnection where Fallback == ExistingCluster {
    /// The servers; `validate()` made sure there are some.
    var servers: [String] { server.servers ?? [] }

    /// The connection. `validate()` has checked the servers and the security settings, so
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
