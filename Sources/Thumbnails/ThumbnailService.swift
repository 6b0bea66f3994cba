import Logging
import SafeFetch

/// The thumbnail stage: fetch a source, render every configured size, store each thumbnail,
/// and describe the result as a ``ThumbnailEvent``.
///
/// Fetch and store are async I/O; rendering runs on the ``RenderPool``'s dedicated threads.
/// The service holds no mutable state, so one instance can serve many concurrent requests;
/// the pool bounds how many images are decoded at once.
public struct ThumbnailService: Sendable {
    public let specs: [ThumbnailSpec]
    public let renderer: ThumbnailRenderer
    public let pool: RenderPool
    public let fetcher: SafeFetcher
    public let store: any BlobStore
    let logger: Logger

    /// Checks the specs once, at start-up, and says which one is wrong.
    public init(
        specs: [ThumbnailSpec],
        renderer: ThumbnailRenderer = ThumbnailRenderer(),
        pool: RenderPool,
        fetcher: SafeFetcher = SafeFetcher(),
        store: any BlobStore,
        logger: Logger = Logger(label: "thumbnails")
    ) throws(ThumbnailError) {
        guard !specs.isEmpty else { throw .invalidSpec("no thumbnail sizes configured") }
        var names = Set<String>()
        for spec in specs {
            try spec.validate()
            guard names.insert(spec.name).inserted else { throw .invalidSpec("size name \"\(spec.name)\" appears twice") }
        }
        self.specs = specs
        self.renderer = renderer
        self.pool = pool
        self.fetcher = fetcher
        self.store = store
        self.logger = logger
    }

    /// The apps' default sizes: a 200x200 square for lists, an 800x800 box for grids.
    public static let defaultSpecs: [ThumbnailSpec] = [
        ThumbnailSpec(name: "list", width: 200, height: 200, mode: .cover, format: .jpeg, quality: 80),
        ThumbnailSpec(name: "grid", width: 800, height: 800, mode: .fit, format: .jpeg, quality: 80),
    ]

    /// Fetches `sourceURL`, renders every spec, stores the results and returns the event.
    public func process(sourceURL: String) async throws(ThumbnailServiceError) -> ThumbnailEvent {
        let fetched: FetchedResponse
        do {
            fetched = try await fetcher.fetch(sourceURL, accept: "image/*")
        } catch {
            throw .fetch(error)
        }
        return try await process(source: fetched.bytes, sourceURL: sourceURL)
    }

    /// Renders and stores already-fetched bytes (the part after fetching).
    public func process(source: [UInt8], sourceURL: String) async throws(ThumbnailServiceError) -> ThumbnailEvent {
        let rendered: RenderResult
        do {
            rendered = try await renderer.render(source, specs: specs, on: pool)
        } catch {
            throw .render(error)
        }
        var stored: [StoredThumbnail] = []
        for thumbnail in rendered.thumbnails {
            let metadata = thumbnail.metadata
            let location: BlobLocation
            do {
                location = try await store.put(thumbnail.bytes, contentHash: metadata.contentHash, format: metadata.format)
            } catch {
                throw .store(error)
            }
            stored.append(StoredThumbnail(metadata: metadata, location: location))
        }
        logger.debug("thumbnails stored", metadata: ["source": "\(sourceURL)", "count": "\(stored.count)"])
        return ThumbnailEvent(
            source: sourceURL,
            sourceHash: rendered.sourceHash,
            sourceFormat: rendered.sourceFormat,
            sourceWidth: rendered.sourceWidth,
            sourceHeight: rendered.sourceHeight,
            thumbnails: stored
        )
    }
}

/// What the stage emits for one source: where each thumbnail is, its size, and the source.
public struct ThumbnailEvent: Sendable, Hashable, Codable {
    /// The source URL as requested.
    public var source: String
    /// SHA-256 of the source bytes.
    public var sourceHash: String
    public var sourceFormat: SourceFormat
    public var sourceWidth: Int
    public var sourceHeight: Int
    /// One entry per configured size, in configuration order.
    public var thumbnails: [StoredThumbnail]
}

/// One stored thumbnail in a ``ThumbnailEvent``.
public struct StoredThumbnail: Sendable, Hashable, Codable {
    /// The size's name from the configuration ("list", "grid").
    public var name: String
    /// Deterministic key of (source, spec): the same for every re-run.
    public var key: String
    /// Where the bytes are.
    public var location: BlobLocation
    public var format: ThumbnailFormat
    public var width: Int
    public var height: Int
    public var byteCount: Int
    /// SHA-256 of the stored bytes.
    public var contentHash: String

    public init(metadata: ThumbnailMetadata, location: BlobLocation) {
        self.name = metadata.name
        self.key = metadata.key
        self.location = location
        self.format = metadata.format
        self.width = metadata.width
        self.height = metadata.height
        self.byteCount = metadata.byteCount
        self.contentHash = metadata.contentHash
    }
}

/// Why the stage could not produce thumbnails for a source, by step.
public enum ThumbnailServiceError: Error, Sendable, Hashable, CustomStringConvertible {
    case fetch(FetchError)
    case render(ThumbnailError)
    case store(BlobStoreError)

    /// Whether retrying the whole request later may succeed. Fetch retries already happened
    /// inside the fetcher; a bad image never gets better; storage failures may be transient.
    public var isRetriable: Bool {
        switch self {
        case let .fetch(error): error.isRetriable
        case .render: false
        case .store: true
        }
    }

    public var description: String {
        switch self {
        case let .fetch(error): "fetch: \(error)"
        case let .render(error): "render: \(error)"
        case let .store(error): "store: \(error)"
        }
    }
}
