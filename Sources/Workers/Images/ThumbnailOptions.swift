/// How the thumbnail worker (`thumbnails.render`, module `Thumbnails`) works, as the topology
/// file sets it. Plain values: the worker turns them into its own types and checks them.
/// Nil means the worker's default (its default sizes are defined once, by the worker).
public struct ThumbnailOptions: Sendable, Hashable {
    /// One configured size.
    public struct Size: Sendable, Hashable {
        public var name: String
        public var width: Int
        public var height: Int
        /// `fit` (whole image inside the box) or `cover` (box filled, centre cropped).
        public var fit: String
        /// `jpeg` or `webp`.
        public var format: String
        /// Encoder quality, 1...100.
        public var quality: Int

        public init(name: String, width: Int, height: Int, fit: String = "fit", format: String = "jpeg", quality: Int = 80) {
            self.name = name
            self.width = width
            self.height = height
            self.fit = fit
            self.format = format
            self.quality = quality
        }
    }

    /// Sizes rendered for every source, in order.
    public var sizes: [Size]?
    /// Images rendered at once (threads); default: the number of cores.
    public var renderThreads: Int?
    /// Budget for one fetch attempt, redirects included.
    public var fetchTimeoutMillis: Int64?
    /// Fetch attempts in total (timeouts, failed connections and 5xx are retried).
    public var fetchAttempts: Int?
    /// Wait before the first fetch retry (doubles per retry).
    public var fetchBackoffMillis: Int64?
    /// Networks (CIDR) fetched from although not public: an internal CDN, a test server.
    public var allowNetworks: [String] = []
    /// Largest source accepted, in bytes.
    public var maxImageBytes: Int?
    /// Largest source accepted, in pixels (read from the header before decoding).
    public var maxPixels: Int?
    /// Where thumbnails are stored (a directory; content-addressed files).
    public var storeDirectory: String?
    /// Whether each stored file is fsync'ed before it is renamed into place (default: yes).
    public var storeSync: Bool?
    /// Directories `file://` sources may be read from (none by default: `file://` is refused).
    public var fileRoots: [String] = []

    public init() {}
}

extension ThumbnailOptions {
    /// The thumbnail worker's keys (`thumbnails.render`).
    public static let stageOptions: [TransformOption] = [
        TransformOption("thumbnail-sizes") { value, options throws(OptionError) in
            guard case .list(let items, _) = value, !items.isEmpty else {
                throw OptionError(value, "expected a list of {name, width, height, fit, format, quality}")
            }
            options.thumbnails.sizes = try value.list("sizes") { item throws(OptionError) in
                var size = Size(name: "", width: 0, height: 0)
                var seen = Set<String>()
                try item.mapping(allowed: ["name", "width", "height", "fit", "format", "quality"]) { key, v throws(OptionError) in
                    seen.insert(key)
                    switch key {
                    case "name": size.name = try v.string()
                    case "width": size.width = try v.int()
                    case "height": size.height = try v.int()
                    case "fit":
                        size.fit = try v.string()
                        guard ["fit", "cover"].contains(size.fit) else { throw OptionError(v, "expected fit or cover, found '\(size.fit)'") }
                    case "format":
                        size.format = try v.string()
                        guard ["jpeg", "webp"].contains(size.format) else { throw OptionError(v, "expected jpeg or webp, found '\(size.format)'") }
                    default:
                        size.quality = try v.int()
                        guard size.quality <= 100 else { throw OptionError(v, "expected 1...100, found \(size.quality)") }
                    }
                }
                for required in ["name", "width", "height"] where !seen.contains(required) {
                    throw OptionError(item, "missing; a size needs name, width and height").inside(".\(required)")
                }
                return size
            }
        },
        TransformOption("render-threads") { value, options throws(OptionError) in options.thumbnails.renderThreads = try value.int() },
        TransformOption("fetch-timeout") { value, options throws(OptionError) in options.thumbnails.fetchTimeoutMillis = try value.milliseconds() },
        TransformOption("fetch-attempts") { value, options throws(OptionError) in options.thumbnails.fetchAttempts = try value.int() },
        TransformOption("fetch-backoff") { value, options throws(OptionError) in options.thumbnails.fetchBackoffMillis = try value.milliseconds() },
        TransformOption("allow-networks") { value, options throws(OptionError) in options.thumbnails.allowNetworks = try value.strings() },
        TransformOption("max-image-bytes") { value, options throws(OptionError) in options.thumbnails.maxImageBytes = try value.int() },
        TransformOption("max-pixels") { value, options throws(OptionError) in options.thumbnails.maxPixels = try value.int() },
        TransformOption("store-directory") { value, options throws(OptionError) in options.thumbnails.storeDirectory = try value.string() },
        TransformOption("store-sync") { value, options throws(OptionError) in options.thumbnails.storeSync = try value.bool() },
        TransformOption("file-roots") { value, options throws(OptionError) in options.thumbnails.fileRoots = try value.strings() },
    ]
}
