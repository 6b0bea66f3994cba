import AsyncHTTPClient
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Workers

extension FCMSender {
    /// The environment variable that may name the service-account key file instead of the
    /// topology (a Kubernetes Secret mounted as a file, a systemd credential).
    public static let credentialsEnvironment = "PIPELINE_FCM_CREDENTIALS_FILE"
    /// The environment variable that may name FCM's base URL (`pipelinectl dev`: its local FCM).
    public static let endpointEnvironment = "PIPELINE_FCM_ENDPOINT"

    /// Builds the stage a topology describes (`options` of a `push.fcm` stage), with its own HTTP
    /// client: shut it down after the stage (``shutdown()``). `concurrency` is the stage's: over
    /// HTTP/1.1 (an FCM emulator, a proxy) the client may open that many connections, so that no
    /// send waits for a free one and each attempt's timeout measures FCM's answer, not the
    /// queue (with 8 connections for 64 sends, a loaded machine timed out attempts that FCM had
    /// taken, and sent them again). Over HTTP/2, FCM's own, one connection carries them all.
    /// Throws a message naming the option or file that is wrong; never shows the key.
    public static func make(
        options: PushOptions, ledger: SentLedger?, concurrency: Int, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(PushConfigurationError) -> FCMSender {
        guard let path = options.credentialsFile ?? environment[credentialsEnvironment], !path.isEmpty else {
            throw PushConfigurationError("credentials-file: missing; name the service-account key file (or set \(credentialsEnvironment))")
        }
        let account = try ServiceAccount.load(path: path)
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: max(8, concurrency))
        let client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
        return FCMSender(
            tokens: FCMAccessTokens(account: account, client: client), client: client,
            endpoint: options.fcmEndpoint ?? environment[endpointEnvironment] ?? "https://fcm.googleapis.com", app: options.app, retry: PushRetry(options), ledger: ledger)
    }
}

extension APNsSender {
    /// The environment variable that may name the `.p8` key file instead of the topology.
    public static let keyEnvironment = "PIPELINE_APNS_KEY_FILE"
    /// The environment variables that may name APNs' base URL and trust roots (`pipelinectl
    /// dev`: its local APNs and the certificate it made).
    public static let endpointEnvironment = "PIPELINE_APNS_ENDPOINT"
    public static let caFileEnvironment = "PIPELINE_APNS_CA_FILE"

    /// Builds the stage a topology describes (`options` of a `push.apns` stage), with its own
    /// HTTP client (one HTTP/2 connection to APNs, many streams; the trust roots of `ca-file`
    /// when given): shut it down after the stage (``client``). Throws a message naming the
    /// option or file that is wrong; never shows the key.
    public static func make(
        options: PushOptions, ledger: SentLedger?, environment: [String: String] = ProcessInfo.processInfo.environment,
        now: @escaping @Sendable () -> Date = { Date() }
    ) throws(PushConfigurationError) -> APNsSender {
        guard let path = options.apnsKeyFile ?? environment[keyEnvironment], !path.isEmpty else {
            throw PushConfigurationError("key-file: missing; name the APNs signing key file, AuthKey_KEYID.p8 (or set \(keyEnvironment))")
        }
        let key = try APNsKey.load(path: path, keyID: options.apnsKeyID ?? "", teamID: options.apnsTeamID ?? "")
        guard let bundle = options.apnsBundleID, !bundle.isEmpty else { throw PushConfigurationError("bundle-id: missing (the app's bundle id, APNs' apns-topic)") }
        var headers = APNsHeaders(topic: bundle)
        if let type = options.apnsPushType { headers.pushType = type }
        if let priority = options.apnsPriority { headers.priority = priority }
        if let ms = options.apnsExpirationMillis { headers.expiration = .milliseconds(ms) }
        var configuration = HTTPClient.Configuration()
        configuration.httpVersion = .automatic
        if let ca = options.apnsCAFile ?? environment[caFileEnvironment] {
            let roots: [NIOSSLCertificate]
            do { roots = try NIOSSLCertificate.fromPEMFile(ca) } catch { throw PushConfigurationError("ca-file: \(ca): not PEM certificates (\(error))") }
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .certificates(roots)
            configuration.tlsConfiguration = tls
        }
        let client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
        return APNsSender(
            tokens: APNsProviderTokens(key: key, now: now), client: client, endpoint: options.apnsEndpoint ?? environment[endpointEnvironment] ?? "https://api.push.apple.com", headers: headers,
            app: options.app, retry: PushRetry(options), ledger: ledger)
    }
}

extension PushRetry {
    /// The topology's `send-*` options over the defaults.
    init(_ options: PushOptions) {
        self.init()
        if let n = options.sendAttempts { attempts = n }
        if let ms = options.sendBackoffMillis { initialBackoff = .milliseconds(ms) }
        if let ms = options.sendTimeoutMillis { attemptTimeout = .milliseconds(ms) }
        if let ms = options.sendDeadlineMillis { deadline = .milliseconds(ms) }
    }
}
