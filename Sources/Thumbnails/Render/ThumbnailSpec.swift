/// How a thumbnail is sized inside its box.
public enum ResizeMode: String, Sendable, Hashable, Codable {
    /// Scale so the whole image fits inside `width` x `height`, keeping the aspect ratio.
    /// The result is at most that size; one side may be shorter.
    case fit
    /// Scale to cover `width` x `height`, then crop the centre: the result is exactly that size.
    case cover
}

/// The encoding of a thumbnail.
public enum ThumbnailFormat: String, Sendable, Hashable, Codable {
    case jpeg
    case webp

    /// File extension used by blob stores.
    public var fileExtension: String {
        switch self {
        case .jpeg: "jpg"
        case .webp: "webp"
        }
    }

    /// MIME type for the output event and HTTP serving.
    public var mimeType: String {
        switch self {
        case .jpeg: "image/jpeg"
        case .webp: "image/webp"
        }
    }
}

/// One thumbnail size, as configured (for example "list" 200x200 cover, "grid" 800x800 fit).
public struct ThumbnailSpec: Sendable, Hashable, Codable {
    /// A name the apps know the size by; part of the output key.
    public var name: String
    public var width: Int
    public var height: Int
    public var mode: ResizeMode
    public var format: ThumbnailFormat
    /// Encoder quality, 1...100.
    public var quality: Int
    /// Whether images smaller than the box are enlarged. Off by default: upscaling only
    /// makes bigger files of the same detail.
    public var allowUpscale: Bool

    public init(
        name: String,
        width: Int,
        height: Int,
        mode: ResizeMode = .fit,
        format: ThumbnailFormat = .jpeg,
        quality: Int = 80,
        allowUpscale: Bool = false
    ) {
        self.name = name
        self.width = width
        self.height = height
        self.mode = mode
        self.format = format
        self.quality = quality
        self.allowUpscale = allowUpscale
    }

    /// A canonical string naming everything that changes the output. Together with the
    /// source's hash it gives the output key, so bump `ThumbnailRenderer.renderVersion`
    /// whenever the rendering itself changes.
    public var fingerprint: String {
        "\(ThumbnailRenderer.renderVersion)|\(name)|\(width)x\(height)|\(mode.rawValue)|\(format.rawValue)|q\(quality)|up\(allowUpscale ? 1 : 0)"
    }

    /// Checks the values a configuration file could get wrong.
    public func validate() throws(ThumbnailError) {
        guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
            throw .invalidSpec("name \"\(name)\" must be non-empty letters, digits, - or _")
        }
        guard (1...10_000).contains(width), (1...10_000).contains(height) else {
            throw .invalidSpec("size \(width)x\(height) of \"\(name)\" must be 1...10000 on each side")
        }
        guard (1...100).contains(quality) else {
            throw .invalidSpec("quality \(quality) of \"\(name)\" must be 1...100")
        }
    }
}

/// The source image formats the renderer accepts. Everything else (SVG, PDF, TIFF,
/// ImageMagick-only formats, …) is refused before libvips parses more than the magic bytes:
/// each loader is attack surface, and the apps only upload these.
public enum SourceFormat: String, Sendable, Hashable, Codable, CaseIterable {
    case jpeg, png, webp, gif, heif
}

/// Limits that protect the worker from hostile or broken input.
public struct RenderLimits: Sendable, Hashable {
    /// Largest accepted input, in bytes (default 20 MB).
    public var maxInputBytes: Int
    /// Largest accepted image, in pixels, read from the header before decoding (default 40 MP).
    public var maxPixels: Int
    /// Wall-clock budget for rendering one source image into all its specs.
    public var timeLimit: Duration
    /// Source formats accepted.
    public var allowedFormats: Set<SourceFormat>

    public init(
        maxInputBytes: Int = 20_000_000,
        maxPixels: Int = 40_000_000,
        timeLimit: Duration = .seconds(10),
        allowedFormats: Set<SourceFormat> = [.jpeg, .png, .webp, .gif]
    ) {
        self.maxInputBytes = maxInputBytes
        self.maxPixels = maxPixels
        self.timeLimit = timeLimit
        self.allowedFormats = allowedFormats
    }
}

/// What is known about a rendered thumbnail.
public struct ThumbnailMetadata: Sendable, Hashable, Codable {
    /// The spec's name.
    public var name: String
    public var format: ThumbnailFormat
    public var width: Int
    public var height: Int
    public var byteCount: Int
    /// SHA-256 of the encoded bytes, lowercase hex.
    public var contentHash: String
    /// SHA-256 of (source hash, spec fingerprint), lowercase hex: the same input and spec
    /// always give the same key, whatever the encoder produced.
    public var key: String
}

/// An encoded thumbnail and its metadata.
public struct Thumbnail: Sendable, Hashable {
    public var bytes: [UInt8]
    public var metadata: ThumbnailMetadata
}

/// The result of rendering one source image into every requested spec.
public struct RenderResult: Sendable, Hashable {
    /// SHA-256 of the source bytes, lowercase hex.
    public var sourceHash: String
    public var sourceFormat: SourceFormat
    /// Source size as stored (before EXIF orientation is applied).
    public var sourceWidth: Int
    public var sourceHeight: Int
    /// One thumbnail per spec, in the order the specs were given.
    public var thumbnails: [Thumbnail]
}
