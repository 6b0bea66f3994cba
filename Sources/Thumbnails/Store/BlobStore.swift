/// Where a stored blob can be found.
public struct BlobLocation: Sendable, Hashable, Codable {
    /// The store-relative key, e.g. `ab/cd/abcd….jpg`.
    public var key: String
    /// An absolute URI for the blob, e.g. `file:///var/thumbs/ab/cd/abcd….jpg`.
    public var uri: String

    public init(key: String, uri: String) {
        self.key = key
        self.uri = uri
    }
}

/// A place thumbnails are written to. Implementations must be content-addressed (the same
/// bytes always land at the same key, so retries and duplicates are harmless) and atomic
/// (a reader never sees a partly written blob).
public protocol BlobStore: Sendable {
    /// Stores `bytes`, whose SHA-256 is `contentHash` (64 lowercase hex characters), and
    /// returns where it is. Storing bytes that are already there succeeds without rewriting.
    func put(_ bytes: [UInt8], contentHash: String, format: ThumbnailFormat) async throws(BlobStoreError) -> BlobLocation
}

/// Why a blob could not be stored.
public enum BlobStoreError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The content hash is not 64 lowercase hex characters (it becomes a path, so it is checked).
    case invalidContentHash(String)
    /// The file system refused; `errno` is the POSIX error number.
    case ioFailed(path: String, operation: String, errno: Int32)
    /// The write did not finish within the store's time limit (a hung file system).
    case timedOut(path: String, after: Duration)

    public var description: String {
        switch self {
        case let .invalidContentHash(hash): "invalid content hash \"\(hash)\""
        case let .ioFailed(path, operation, errno): "\(operation) failed for \(path): errno \(errno)"
        case let .timedOut(path, after): "writing \(path) did not finish within \(after)"
        }
    }
}

extension BlobStoreError {
    static func validate(_ contentHash: String) throws(BlobStoreError) {
        guard contentHash.utf8.count == 64,
              contentHash.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) })
        else { throw .invalidContentHash(contentHash) }
    }
}
