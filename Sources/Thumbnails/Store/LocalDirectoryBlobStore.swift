#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Deadlines
import Dispatch
import SafeFetch

/// A ``BlobStore`` in a local directory: `root/ab/cd/<sha256>.<ext>`.
///
/// Writes go to a temporary file in the destination directory, are flushed with `fsync`, and
/// are renamed into place, so a blob is either absent or complete. The file system calls
/// block, so they run on a dispatch queue rather than on the caller's (cooperative) thread.
public struct LocalDirectoryBlobStore: BlobStore {
    /// The directory blobs are written under.
    public let root: String

    /// Whether to `fsync` each blob before renaming it into place (durability across a
    /// power cut). On by default; benchmarks may turn it off.
    public var syncWrites: Bool

    /// How long one `put` may take, directories, write, `fsync` and rename included: a hung
    /// file system (a stalled network mount) fails the put with `timedOut` instead of holding its
    /// partition, and any revocation of it, for good. The blocked call itself cannot be
    /// interrupted and ends in the background.
    public var timeout: Duration

    /// The blocking write (a seam for tests: a write that hangs).
    var blockingWrite: @Sendable (_ bytes: [UInt8], _ root: String, _ key: String, _ sync: Bool) throws(BlobStoreError) -> Void = Self.writeAtomically

    /// Creates a store under `root` (created on first write if missing).
    public init(root: String, syncWrites: Bool = true, timeout: Duration = .seconds(30)) {
        self.root = root.hasSuffix("/") && root.count > 1 ? String(root.dropLast()) : root
        self.syncWrites = syncWrites
        self.timeout = timeout
    }

    /// The store-relative key for a blob: two levels of fan-out keep directories small.
    public static func key(contentHash: String, format: ThumbnailFormat) -> String {
        let h = Array(contentHash)
        return "\(String(h[0..<2]))/\(String(h[2..<4]))/\(contentHash).\(format.fileExtension)"
    }

    public func put(_ bytes: [UInt8], contentHash: String, format: ThumbnailFormat) async throws(BlobStoreError) -> BlobLocation {
        try BlobStoreError.validate(contentHash)
        let key = Self.key(contentHash: contentHash, format: format)
        let root = self.root
        let sync = self.syncWrites
        let blockingWrite = self.blockingWrite
        let write = { @Sendable () async -> Result<Void, BlobStoreError> in
            await withCheckedContinuation { continuation in
                DispatchQueue.global(qos: .utility).async {
                    continuation.resume(returning: Result { () throws(BlobStoreError) in
                        try blockingWrite(bytes, root, key, sync)
                    })
                }
            }
        }
        guard let result = await Deadline.race(until: .now + timeout, write) else {
            throw .timedOut(path: root + "/" + key, after: timeout)
        }
        try result.get()
        return BlobLocation(key: key, uri: "file://" + root + "/" + key)
    }

    private static func writeAtomically(_ bytes: [UInt8], root: String, key: String, sync: Bool) throws(BlobStoreError) {
        let path = root + "/" + key
        if access(path, F_OK) == 0 { return }  // content-addressed: already there means same bytes
        let directory = String(path[..<path.lastIndex(of: "/")!])
        try makeDirectories(directory)

        // A unique temporary name in the same directory, so rename() is atomic.
        var template = Array((directory + "/.tmp-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw .ioFailed(path: directory, operation: "mkstemp", errno: errno) }
        let tmpPath = String(cString: template.map { UInt8(bitPattern: $0) })
        var renamed = false
        defer {
            if !renamed { unlink(tmpPath) }
        }
        do {
            defer { close(fd) }
            // Returns the errno of a failed write, or 0.
            let writeError: Int32 = bytes.withUnsafeBytes { raw in
                var written = 0
                while written < raw.count {
                    let n = write(fd, raw.baseAddress! + written, raw.count - written)
                    if n < 0 {
                        if errno == EINTR { continue }
                        return errno
                    }
                    written += n
                }
                return 0
            }
            if writeError != 0 { throw .ioFailed(path: tmpPath, operation: "write", errno: writeError) }
            fchmod(fd, 0o644)
            if sync, fsync(fd) != 0 {
                throw .ioFailed(path: tmpPath, operation: "fsync", errno: errno)
            }
        }
        guard rename(tmpPath, path) == 0 else { throw .ioFailed(path: path, operation: "rename", errno: errno) }
        renamed = true
    }

    private static func makeDirectories(_ path: String) throws(BlobStoreError) {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/" + component
            if mkdir(current, 0o755) != 0, errno != EEXIST {
                throw .ioFailed(path: current, operation: "mkdir", errno: errno)
            }
        }
    }
}
