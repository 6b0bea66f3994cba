import ArgumentParser
import Foundation
import Kafka

/// SASL/SSL settings. The password never comes from a flag (flags show in `ps`): it is read
/// from `KAFKA_SASL_PASSWORD` or from `--sasl-password-file`.
struct SecurityOptions: ParsableArguments {
    enum SecurityProtocol: String, ExpressibleByArgument, CaseIterable {
        case plaintext, ssl
        case saslPlaintext = "sasl_plaintext"
        case saslSSL = "sasl_ssl"
    }

    @Option(help: "plaintext, ssl, sasl_plaintext or sasl_ssl.") var securityProtocol: SecurityProtocol = .plaintext
    @Option(help: "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.") var saslMechanism: String = "PLAIN"
    @Option(help: "SASL user name.") var saslUsername: String?
    @Option(help: "File holding the SASL password (default: $KAFKA_SASL_PASSWORD).") var saslPasswordFile: String?
    @Option(help: "CA certificate file (PEM) for ssl and sasl_ssl.") var sslCaLocation: String?

    func configuration() throws -> KafkaConfiguration.Security {
        let tls = KafkaConfiguration.TLS(caLocation: sslCaLocation)
        switch securityProtocol {
        case .plaintext: return .plaintext
        case .ssl: return .ssl(tls)
        case .saslPlaintext, .saslSSL:
            guard let mechanism = KafkaConfiguration.SASL.Mechanism(rawValue: saslMechanism) else {
                throw ValidationError("--sasl-mechanism: '\(saslMechanism)' is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
            }
            guard let user = saslUsername else { throw ValidationError("--sasl-username is required with --security-protocol \(securityProtocol.rawValue)") }
            let password: String
            if let file = saslPasswordFile {
                guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                    throw ValidationError("--sasl-password-file: cannot read '\(file)'")
                }
                password = text.trimmingCharacters(in: .newlines)
            } else if let env = ProcessInfo.processInfo.environment["KAFKA_SASL_PASSWORD"] {
                password = env
            } else {
                throw ValidationError("a SASL password is required: set KAFKA_SASL_PASSWORD or --sasl-password-file")
            }
            let sasl = KafkaConfiguration.SASL(mechanism: mechanism, username: user, password: Secret(password))
            return securityProtocol == .saslSSL ? .saslSSL(sasl, tls) : .saslPlaintext(sasl)
        }
    }
}
