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
