import AsyncHTTPClient
import Foundation
import Logging
import Workers

extension FCMSender {
    /// The environment variable that may name the service-account key file instead of the
    /// topology (a Kubernetes Secret mounted as a file, a systemd credential).
    public static let credentialsEnvironment = "PIPELINE_FCM_CREDENTIALS_FILE"

    /// Builds the stage a topology describes (`options` of a `push.fcm` stage). Throws a
    /// message naming the option or file that is wrong; never shows the key.
    public static func make(
        options: PushOptions, ledger: SentLedger?, environment: [String: String] = ProcessInfo.processInfo.environment,
        client: HTTPClient = .shared, logger: Logger = Logger(label: "push.fcm")
    ) throws(PushConfigurationError) -> FCMSender {
        guard let path = options.credentialsFile ?? environment[credentialsEnvironment], !path.isEmpty else {
            throw PushConfigurationError("credentials-file: missing; name the service-account key file (or set \(credentialsEnvironment))")
        }
        let account = try ServiceAccount.load(path: path)
        var retry = PushRetry()
        if let n = options.sendAttempts { retry.attempts = n }
        if let ms = options.sendBackoffMillis { retry.initialBackoff = .milliseconds(ms) }
        if let ms = options.sendTimeoutMillis { retry.attemptTimeout = .milliseconds(ms) }
        if let ms = options.sendDeadlineMillis { retry.deadline = .milliseconds(ms) }
        return FCMSender(
            tokens: FCMAccessTokens(account: account, client: client), client: client,
            endpoint: options.fcmEndpoint ?? "https://fcm.googleapis.com", app: options.app, retry: retry, ledger: ledger, logger: logger)
    }
}
