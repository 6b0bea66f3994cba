/// The settings of a push sender stage (`push.fcm`) as the topology gives them. Secrets are never
/// here: `credentials-file` names the service-account key file (or `PIPELINE_FCM_CREDENTIALS_FILE`
/// in the environment does), which the worker reads and never logs.
public struct PushOptions: Sendable, Hashable {
    /// The service-account key file (JSON, from the Firebase console).
    public var credentialsFile: String?
    /// FCM's base URL (default `https://fcm.googleapis.com`; a local fake in tests and `dev`).
    public var fcmEndpoint: String?
    /// The app named on dead-token records (default: the service account's project).
    public var app: String?
    /// Attempts per notification (default 5), the first backoff (500 ms), each attempt's timeout
    /// (10 s) and the whole send's deadline (60 s).
    public var sendAttempts: Int?
    public var sendBackoffMillis: Int64?
    public var sendTimeoutMillis: Int64?
    public var sendDeadlineMillis: Int64?
    /// How far back the sent ledger is read at start (default 24 h).
    public var ledgerWindowMillis: Int64?

    public init() {}
}

extension PushOptions {
    /// The sender's keys (`push.fcm`).
    public static let stageOptions: [TransformOption] = [
        TransformOption("credentials-file") { value, options throws(OptionError) in options.push.credentialsFile = try value.string() },
        TransformOption("fcm-endpoint") { value, options throws(OptionError) in
            let url = try value.string()
            guard url.hasPrefix("https://") || url.hasPrefix("http://") else { throw OptionError(value, "expected an http(s) URL, found '\(url)'") }
            options.push.fcmEndpoint = url
        },
        TransformOption("app") { value, options throws(OptionError) in options.push.app = try value.string() },
        TransformOption("send-attempts") { value, options throws(OptionError) in options.push.sendAttempts = try value.int(min: 1, max: 100) },
        TransformOption("send-backoff") { value, options throws(OptionError) in options.push.sendBackoffMillis = try value.milliseconds() },
        TransformOption("send-timeout") { value, options throws(OptionError) in options.push.sendTimeoutMillis = try value.milliseconds() },
        TransformOption("send-deadline") { value, options throws(OptionError) in options.push.sendDeadlineMillis = try value.milliseconds() },
        TransformOption("ledger-window") { value, options throws(OptionError) in options.push.ledgerWindowMillis = try value.milliseconds() },
    ]
}
