import Foundation
import Logging
import Workers
import SafeFetch

extension ThumbnailTransform {
    /// Builds the stage a topology describes (`options` of a `thumbnails.render` stage): sizes
    /// (default ``ThumbnailService/defaultSpecs``), render threads (default: the number of cores),
    /// fetch budget and allow-list, limits and the store directory (relative paths are resolved
    /// against the working directory). Shut the returned pool down when the worker stops.
    ///
    /// Throws a message naming the option that is wrong.
    public static func make(
        options: ThumbnailOptions, logger: Logger = Logger(label: "thumbnails")
    ) throws -> (stage: ThumbnailTransform, pool: RenderPool) {
        let specs: [ThumbnailSpec] = try (options.sizes ?? []).map { size in
            guard let mode = ResizeMode(rawValue: size.fit) else { throw OptionError("thumbnail-sizes: fit '\(size.fit)' is not fit or cover") }
            guard let format = ThumbnailFormat(rawValue: size.format) else {
                throw OptionError("thumbnail-sizes: format '\(size.format)' is not jpeg or webp")
            }
            return ThumbnailSpec(name: size.name, width: size.width, height: size.height, mode: mode, format: format, quality: size.quality)
        }
        var fetch = FetchConfiguration()
        if let ms = options.fetchTimeoutMillis {
            fetch.attemptTimeout = .milliseconds(ms)
            fetch.readTimeout = min(fetch.readTimeout, .milliseconds(ms))
            fetch.connectTimeout = min(fetch.connectTimeout, .milliseconds(ms))
        }
        if let attempts = options.fetchAttempts { fetch.maxAttempts = attempts }
        if let ms = options.fetchBackoffMillis { fetch.initialBackoff = .milliseconds(ms) }
        var allow: [IPNetwork] = []
        for text in options.allowNetworks {
            guard let network = IPNetwork(text) else { throw OptionError("allow-networks: '\(text)' is not a network such as 10.0.0.0/8 or 127.0.0.1/32") }
            allow.append(network)
        }
        fetch.destinations = DestinationPolicy(allowList: allow)
        fetch.fileRoots = options.fileRoots
        var limits = RenderLimits()
        if let bytes = options.maxImageBytes {
            limits.maxInputBytes = bytes
            fetch.maxBytes = bytes
        }
        if let pixels = options.maxPixels { limits.maxPixels = pixels }
        guard let root = storeRoot(options) else {
            throw OptionError("store-directory: missing; name the directory thumbnails are written to")
        }
        let pool = RenderPool(threads: options.renderThreads ?? ProcessInfo.processInfo.activeProcessorCount)
        do {
            let service = try ThumbnailService(
                specs: specs.isEmpty ? ThumbnailService.defaultSpecs : specs, renderer: ThumbnailRenderer(limits: limits), pool: pool,
                fetcher: SafeFetcher(configuration: fetch, logger: logger), store: LocalDirectoryBlobStore(root: root, syncWrites: options.storeSync ?? true), logger: logger)
            return (ThumbnailTransform(service: service), pool)
        } catch {
            pool.shutdown()
            throw OptionError("thumbnail-sizes: \(error)")
        }
    }

    /// The absolute directory thumbnails are stored in (`store-directory`, relative to the
    /// working directory), or nil when none is configured.
    public static func storeRoot(_ options: ThumbnailOptions) -> String? {
        guard let directory = options.storeDirectory, !directory.isEmpty else { return nil }
        return directory.hasPrefix("/") ? directory : FileManager.default.currentDirectoryPath + "/" + directory
    }

    /// A thumbnail option the worker cannot use.
    public struct OptionError: Error, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }
}
