#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// A file of what the broker acknowledged, one line per record: `topic partition offset hash`
/// (the hash of the value, FNV-1a 64 in hex). A verifier compares it with what the topic holds
/// afterwards: an acknowledged offset that is gone, or holds other bytes, is the broker's loss
/// (tansu on S3 can lose records it acknowledged just before a restart, and write later records
/// at their offsets, which leaves no hole to see). Written with `write(2)` per call (no buffer a
/// SIGKILL could lose); for verification runs, not production.
public final class AcknowledgementLog: Sendable {
    private let fd: Int32
    private let lock = Mutex(())

    public init(path: String) throws {
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw KafkaError(code: .invalidConfiguration, message: "\(path): cannot open the acknowledgement log (errno \(errno))") }
    }

    deinit { close(fd) }

    /// Appends the records acknowledged in one delivery.
    public func append(_ entries: [Entry]) {
        guard !entries.isEmpty else { return }
        let text = entries.map(\.line).joined() 
        lock.withLock { _ in
            var bytes = Array(text.utf8)
            var written = 0
            while written < bytes.count {
                let n = bytes.withUnsafeMutableBytes { write(fd, $0.baseAddress! + written, $0.count - written) }
                if n <= 0 { break }
                written += n
            }
            bytes.removeAll()
        }
    }

    public struct Entry: Sendable, Hashable {
        public var topic: String
        public var partition: Int32
        public var offset: Int64
        public var hash: UInt64

        public init(topic: String, partition: Int32, offset: Int64, value: [UInt8]?) {
            self.topic = topic
            self.partition = partition
            self.offset = offset
            self.hash = Self.hash(value)
        }

        init(topic: String, partition: Int32, offset: Int64, hash: UInt64) {
            self.topic = topic
            self.partition = partition
            self.offset = offset
            self.hash = hash
        }

        var line: String { "\(topic) \(partition) \(offset) \(String(hash, radix: 16))\n" }

        /// FNV-1a 64 of the value (a tombstone hashes as no bytes).
        public static func hash(_ value: [UInt8]?) -> UInt64 {
            var h: UInt64 = 0xcbf2_9ce4_8422_2325
            for b in value ?? [] {
                h ^= UInt64(b)
                h = h &* 0x100_0000_01b3
            }
            return h
        }
    }

    /// The entries of a log file (a torn last line is skipped).
    public static func read(path: String) -> [Entry] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let f = line.split(separator: " ")
            guard f.count == 4, let p = Int32(f[1]), let o = Int64(f[2]), let h = UInt64(f[3], radix: 16) else { return nil }
            return Entry(topic: String(f[0]), partition: p, offset: o, hash: h)
        }
    }

    /// How many acknowledged records of `topic` the topic no longer holds as they were: their
    /// offset is gone, or holds other bytes.
    public static func gone(_ entries: [Entry], topic: String, held: [ConsumerRecord]) -> Int {
        var byPosition: [TopicPartitionOffset: UInt64] = [:]
        for r in held { byPosition[TopicPartitionOffset(topic, r.partition, offset: r.offset)] = Entry.hash(r.value) }
        var seen = Set<Entry>()
        return entries.filter { $0.topic == topic && seen.insert($0).inserted }.filter { e in
            byPosition[TopicPartitionOffset(topic, e.partition, offset: e.offset)] != e.hash
        }.count
    }
}
