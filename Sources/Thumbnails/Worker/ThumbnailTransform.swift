import Workers

/// `thumbnails.render`: a ``ThumbnailRequest`` in, one `thumbnails.ready` event out, naming every
/// stored thumbnail of the source (one per configured size) and where it came from.
///
/// The work is the ``ThumbnailService``'s: fetch (with its retries on timeouts, failed
/// connections and 5xx, and its refusal of private destinations), render on the
/// ``RenderPool``'s threads, store content-addressed. What cannot be done becomes a dead letter
/// with a reason: `destination-refused`, `source-rejected` (4xx), `fetch-failed` (retries
/// spent), `unsupported-image`, `corrupt-image`, `decompression-bomb`, `too-large`,
/// `render-failed`, `store-failed`.
///
/// Idempotent: a request delivered twice stores nothing new (the keys are content hashes) and
/// yields the same event under the same dedupe key (`thumbs-ready:<request>:<source hash>`).
public struct ThumbnailTransform: ConcurrentTransform {
    public let service: ThumbnailService
    public var limits: DecodeLimits

    public init(service: ThumbnailService, limits: DecodeLimits = .default) {
        self.service = service
        self.limits = limits
    }

    /// The stage's name in a topology's `chain`.
    public static let transformName = "thumbnails.render"
    public var name: String { Self.transformName }

    public func process(_ record: InputRecord) async -> TransformOutput {
        guard let value = record.value else { return .empty }
        let request: ThumbnailRequest
        do { request = try ThumbnailRequest.decode(value, limits: limits) } catch { return TransformOutput(failures: [error]) }
        do {
            let event = try await service.process(sourceURL: request.sourceURL)
            return TransformOutput(records: [Self.ready(event, for: request)])
        } catch {
            return TransformOutput(failures: [Self.failure(error)])
        }
    }

    /// The `thumbnails.ready` record: keyed like the request (the owner), so the events of one
    /// owner stay in order on one partition.
    static func ready(_ event: ThumbnailEvent, for request: ThumbnailRequest) -> OutputRecord {
        var w = JSONWriter(capacity: 512)
        w.beginObject()
        w.key("owner"); w.string(request.owner.rawValue)
        w.key("owner_id"); w.string(request.ownerId)
        w.key("image_index"); w.int(Int64(request.imageIndex))
        w.key("source_url"); w.string(request.sourceURL)
        w.key("source_hash"); w.string(event.sourceHash)
        w.key("source_format"); w.string(event.sourceFormat.rawValue)
        w.key("source_width"); w.int(Int64(event.sourceWidth))
        w.key("source_height"); w.int(Int64(event.sourceHeight))
        w.key("thumbnails")
        w.beginArray()
        for t in event.thumbnails {
            w.beginObject()
            w.key("name"); w.string(t.name)
            w.key("key"); w.string(t.key)
            w.key("location"); w.string(t.location.key)
            w.key("uri"); w.string(t.location.uri)
            w.key("width"); w.int(Int64(t.width))
            w.key("height"); w.int(Int64(t.height))
            w.key("bytes"); w.int(Int64(t.byteCount))
            w.key("format"); w.string(t.format.rawValue)
            w.key("content_hash"); w.string(t.contentHash)
            w.endObject()
        }
        w.endArray()
        w.key("request"); w.string(request.dedupeKey)
        w.endObject()
        return OutputRecord(
            output: "thumbnails.ready", key: Array(request.recordKey.utf8), value: w.bytes,
            dedupeKey: "thumbs-ready:\(request.dedupeKey):\(event.sourceHash.prefix(16))")
    }

    /// The dead-letter reason for what went wrong, with the error's own words as detail.
    static func failure(_ error: ThumbnailServiceError) -> DecodeFailure {
        let reason: DecodeFailure.Reason
        let field: String
        switch error {
        case .fetch(let e):
            field = "source_url"
            switch e {
            case .invalidURL, .unsupportedScheme: reason = .invalidValue
            case .destinationNotAllowed, .fileNotAllowed: reason = .destinationRefused
            case .httpStatus(_, let status): reason = (500...599).contains(status) ? .fetchFailed : .sourceRejected
            case .tooManyRedirects, .redirectWithoutLocation: reason = .sourceRejected
            case .tooLarge: reason = .tooLarge
            case .timedOut, .connectionFailed, .resolutionFailed, .fileReadFailed: reason = .fetchFailed
            }
        case .render(let e):
            field = "$image"
            switch e {
            case .tooLarge: reason = .tooLarge
            case .tooManyPixels: reason = .decompressionBomb
            case .unsupportedFormat: reason = .unsupportedImage
            case .corrupt: reason = .corruptImage
            case .timedOut, .invalidSpec, .encodeFailed, .renderPoolShutDown: reason = .renderFailed
            }
        case .store:
            field = "$store"
            reason = .storeFailed
        }
        return DecodeFailure(field: field, reason: reason, detail: error.description)
    }
}
