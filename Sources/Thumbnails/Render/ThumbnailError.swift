/// Why an image could not be turned into thumbnails. Every case describes the input (or the
/// configuration), so a worker can report it and move on; none of them is a crash.
public enum ThumbnailError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The input is larger than the byte limit.
    case tooLarge(bytes: Int, limit: Int)
    /// The header declares more pixels than the limit (a decompression bomb, or just huge).
    case tooManyPixels(width: Int, height: Int, limit: Int)
    /// No accepted decoder recognises the bytes; `detected` names libvips' loader if one did.
    case unsupportedFormat(detected: String?)
    /// The bytes look like an accepted format but do not decode (truncated, damaged, empty).
    case corrupt(reason: String)
    /// Rendering took longer than the time limit and was stopped.
    case timedOut(limit: Duration)
    /// A spec in the configuration is invalid.
    case invalidSpec(String)
    /// libvips failed while encoding; the message is libvips' own.
    case encodeFailed(reason: String)
    /// The ``RenderPool`` was shut down before the image was rendered.
    case renderPoolShutDown

    public var description: String {
        switch self {
        case let .tooLarge(bytes, limit): "image is \(bytes) bytes, over the limit of \(limit)"
        case let .tooManyPixels(w, h, limit): "image declares \(w)x\(h) pixels, over the limit of \(limit)"
        case let .unsupportedFormat(detected): "unsupported image format" + (detected.map { " (\($0))" } ?? "")
        case let .corrupt(reason): "corrupt image: \(reason)"
        case let .timedOut(limit): "rendering took longer than \(limit)"
        case let .invalidSpec(why): "invalid thumbnail spec: \(why)"
        case let .encodeFailed(reason): "encoding failed: \(reason)"
        case .renderPoolShutDown: "render pool is shut down"
        }
    }
}
