/// Why an input could not be used. A value, never a crash: the runtime sends it to the
/// dead-letter topic with the record's origin.
public struct DecodeFailure: Error, Sendable, Hashable, Codable, CustomStringConvertible {
    /// What kind of problem it is; stable strings, safe to alert on.
    public enum Reason: String, Sendable, Hashable, Codable, CaseIterable {
        /// Not JSON (syntax error, truncated input, bad escape, invalid UTF-8).
        case malformedJSON = "malformed-json"
        /// A required field is absent (or null where null is not allowed).
        case missingField = "missing-field"
        /// The field has the wrong JSON type (string where a number is needed, …).
        case wrongType = "wrong-type"
        /// Well-formed but impossible: negative price, unknown currency, bad date, too many images.
        case invalidValue = "invalid-value"
        /// Over a configured size limit (bytes, elements).
        case tooLarge = "too-large"
        /// Nested deeper than the configured limit.
        case tooDeep = "too-deep"
        /// A tombstone (or empty value) where a payload is needed.
        case emptyValue = "empty-value"
        /// The transform's outputs for this input could not be delivered within the retry budget
        /// (set by the runtime, never by a transform; the error code is in the dead letter).
        case deliveryFailed = "delivery-failed"
        /// A source (image) could not be fetched within the retry budget: timeouts, refused
        /// connections, 5xx answers.
        case fetchFailed = "fetch-failed"
        /// The source's server answered with a final error (4xx, a redirect loop).
        case sourceRejected = "source-rejected"
        /// The source's address is private, loopback, link-local or a metadata endpoint (and not
        /// allow-listed), or its scheme or path is not allowed. Nothing was fetched.
        case destinationRefused = "destination-refused"
        /// The bytes are not an image format the worker accepts.
        case unsupportedImage = "unsupported-image"
        /// The image is damaged or truncated.
        case corruptImage = "corrupt-image"
        /// The header declares more pixels than the limit: a decompression bomb (or just huge).
        case decompressionBomb = "decompression-bomb"
        /// Rendering or encoding failed, or took longer than its time limit.
        case renderFailed = "render-failed"
        /// The rendered result could not be stored.
        case storeFailed = "store-failed"
        /// The transform did not finish the record within the time the runtime allows it (set by the
        /// runtime: exactly once, half the transaction timeout, so the transaction can commit).
        case timedOut = "timed-out"
        /// A push provider (FCM, APNs) could not be reached or kept answering 429 or 5xx until
        /// the send's attempts or deadline were spent.
        case sendFailed = "send-failed"
        /// A push provider refused the message for good (a 4xx other than a dead token: a sender
        /// mismatch, an invalid payload); the provider's reason is in the detail.
        case sendRejected = "send-rejected"
    }

    /// Path of the offending field, e.g. `trade_price`, `[1].code`, `pages[3].images`; `$` is the whole value.
    public var field: String
    public var reason: Reason
    /// Human-readable detail (expected type, byte offset, the bad value).
    public var detail: String

    public init(field: String, reason: Reason, detail: String) {
        self.field = field
        self.reason = reason
        self.detail = detail
    }

    public var description: String { "\(field): \(reason.rawValue): \(detail)" }

    /// The same failure with `component` prefixed to its path (used while unwinding nested decoders).
    func under(_ component: String) -> DecodeFailure {
        var copy = self
        if field.isEmpty || field == "$" {
            copy.field = component
        } else if field.hasPrefix("[") {
            copy.field = component + field
        } else {
            copy.field = component + "." + field
        }
        return copy
    }
}

/// Bounds every decoder enforces before and while it reads hostile input.
public struct DecodeLimits: Sendable, Hashable, Codable {
    /// Largest accepted value in bytes (default 1 MiB).
    public var maxBytes: Int
    /// Deepest accepted nesting of arrays and objects (default 32; capped at 512 so the
    /// recursive skipper can never exhaust the stack).
    public var maxDepth: Int
    /// Most elements accepted in one array (default 10,000).
    public var maxArrayElements: Int

    public init(maxBytes: Int = 1 << 20, maxDepth: Int = 32, maxArrayElements: Int = 10_000) {
        self.maxBytes = maxBytes
        self.maxDepth = min(max(maxDepth, 1), 512)
        self.maxArrayElements = maxArrayElements
    }

    public static let `default` = DecodeLimits()
}
