/// The settings of a push sender stage (`push.fcm`, `push.apns`) as the topology gives them.
/// Secrets are never here: `credentials-file` (FCM's service-account key file) and `key-file`
/// (APNs' `.p8` signing key) name files, or `PIPELINE_FCM_CREDENTIALS_FILE` and
/// `PIPELINE_APNS_KEY_FILE` in the environment do; the worker reads them and never logs them.
public struct PushOptions: Sendable, Hashable {
    /// The service-account key file (JSON, from the Firebase console).
    public var credentialsFile: String?
    /// FCM's base URL (default `https://fcm.googleapis.com`; a local fake in tests and `dev`).
    public var fcmEndpoint: String?
    /// APNs' signing key (`AuthKey_KEYID.p8`), its key id and the team id it belongs to.
    public var apnsKeyFile: String?
    public var apnsKeyID: String?
    public var apnsTeamID: String?
    /// The app's bundle id: the `apns-topic` of every send.
    public var apnsBundleID: String?
    /// APNs' base URL (default `https://api.push.apple.com`; `https://api.sandbox.push.apple.com`
    /// for development builds, a local APNs in tests and `dev`).
    public var apnsEndpoint: String?
    /// Trust roots (PEM) for the APNs connection instead of the system's (a local APNs, a proxy).
    public var apnsCAFile: String?
    /// `apns-push-type` (default `alert`), `apns-priority` (default 10), and how long APNs keeps
    /// an undelivered notification (`apns-expiration`, default 24 h; 0: one delivery attempt).
    public var apnsPushType: String?
    public var apnsPriority: Int?
    public var apnsExpirationMillis: Int64?
    /// The app named on dead-token records (default: the project id, or the bundle id).
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
    /// FCM's keys (`push.fcm`).
    public static let fcmStageOptions: [TransformOption] = [
        TransformOption("credentials-file") { value, options throws(OptionError) in options.push.credentialsFile = try value.string() },
        TransformOption("fcm-endpoint") { value, options throws(OptionError) in options.push.fcmEndpoint = try url(value) },
    ] + senderOptions

    /// APNs' keys (`push.apns`).
    public static let apnsStageOptions: [TransformOption] = [
        TransformOption("key-file") { value, options throws(OptionError) in options.push.apnsKeyFile = try value.string() },
        TransformOption("key-id") { value, options throws(OptionError) in options.push.apnsKeyID = try value.string() },
        TransformOption("team-id") { value, options throws(OptionError) in options.push.apnsTeamID = try value.string() },
        TransformOption("bundle-id") { value, options throws(OptionError) in options.push.apnsBundleID = try value.string() },
        TransformOption("apns-endpoint") { value, options throws(OptionError) in options.push.apnsEndpoint = try url(value) },
        TransformOption("ca-file") { value, options throws(OptionError) in options.push.apnsCAFile = try value.string() },
        TransformOption("push-type") { value, options throws(OptionError) in
            let type = try value.string()
            let known = ["alert", "background", "location", "voip", "complication", "fileprovider", "mdm", "liveactivity", "pushtotalk", "widgets"]
            guard known.contains(type) else { throw OptionError(value, "expected one of \(known.joined(separator: ", ")), found '\(type)'") }
            options.push.apnsPushType = type
        },
        TransformOption("priority") { value, options throws(OptionError) in
            let priority = try value.int(min: 1, max: 10)
            guard [1, 5, 10].contains(priority) else { throw OptionError(value, "expected 10, 5 or 1 (APNs' priorities), found \(priority)") }
            options.push.apnsPriority = priority
        },
        TransformOption("expiration") { value, options throws(OptionError) in options.push.apnsExpirationMillis = try value.milliseconds() },
    ] + senderOptions

    /// What both senders take: retries, the ledger, the app's name.
    static let senderOptions: [TransformOption] = [
        TransformOption("app") { value, options throws(OptionError) in options.push.app = try value.string() },
        TransformOption("send-attempts") { value, options throws(OptionError) in options.push.sendAttempts = try value.int(min: 1, max: 100) },
        TransformOption("send-backoff") { value, options throws(OptionError) in options.push.sendBackoffMillis = try value.milliseconds() },
        TransformOption("send-timeout") { value, options throws(OptionError) in options.push.sendTimeoutMillis = try value.milliseconds() },
        TransformOption("send-deadline") { value, options throws(OptionError) in options.push.sendDeadlineMillis = try value.milliseconds() },
        TransformOption("ledger-window") { value, options throws(OptionError) in options.push.ledgerWindowMillis = try value.milliseconds() },
    ]

    private static func url(_ value: OptionValue) throws(OptionError) -> String {
        let url = try value.string()
        guard url.hasPrefix("https://") || url.hasPrefix("http://") else { throw OptionError(value, "expected an http(s) URL, found '\(url)'") }
        return url
    }
}
