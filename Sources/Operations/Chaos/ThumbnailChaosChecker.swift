import Kafka
import Workers

/// What a chaos run's verdict says, whatever its workload.
public protocol ChaosVerdict: Sendable, CustomStringConvertible {
    var passed: Bool { get }
    /// Whether the broker, not the workers, broke the run.
    var brokerFault: Bool { get }
    /// PASS, FAIL, or what the broker did.
    var verdict: String { get }
}

extension ChaosReport: ChaosVerdict {}

/// One thumbnail request a chaos run fed, and where it landed.
public struct ThumbnailChaosInput: Sendable {
    public var request: ThumbnailRequest
    public var partition: Int32
    public var offset: Int64

    public init(request: ThumbnailRequest, partition: Int32, offset: Int64) {
        self.request = request
        self.partition = partition
        self.offset = offset
    }
}

/// The verdict of a thumbnail run (`pipelinectl chaos --workload thumbnails`): an I/O stage
/// whose image server goes slow (bodies trickled, requests left hanging) while workers are
/// killed and paused. Every request must end as thumbnails or as a dead letter, and no slow
/// fetch may pin a partition: the group's offsets reach the end, and every worker stops within
/// its shutdown deadline.
public struct ThumbnailChaosReport: ChaosVerdict {
    public var requests = 0
    /// Requests with neither a ready event nor a dead letter.
    public var lost: [String] = []
    /// Requests answered with thumbnails.
    public var ready = 0
    /// Requests dead-lettered, by reason.
    public var deadLettered: [String: Int] = [:]
    /// Requests with more than one ready event (at least once allows it).
    public var duplicates = 0
    /// Ready events or dead letters of no request the run fed.
    public var unexpected: [String] = []
    public var offsetsAtEnd = false
    public var offsetsDetail = ""
    public var badExits: [String] = []
    public var workerLogs: [String] = []
    public var wedged: String?
    /// Requests fed while the image server was slow.
    public var fedWhileSlow = 0

    public init() {}

    public var passed: Bool { wedged == nil && lost.isEmpty && unexpected.isEmpty && offsetsAtEnd && badExits.isEmpty }
    public var brokerFault: Bool { wedged != nil }
    public var verdict: String { wedged != nil ? "BROKER WEDGED" : passed ? "PASS" : "FAIL" }

    public var description: String {
        func list(_ items: [String]) -> String { items.isEmpty ? "0" : "\(items.count) \(items.prefix(3))" }
        var lines = [
            "requests: \(requests) (\(fedWhileSlow) while the image server was slow), lost \(list(lost)), unexpected \(list(unexpected))",
            "answers: thumbnails \(ready) (duplicates \(duplicates)), dead letters \(deadLettered.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))",
            "offsets: \(offsetsAtEnd ? "the group's offsets reached the end" : "NOT at the end: \(offsetsDetail)")",
            "workers: \(badExits.isEmpty ? "every exit as expected" : "unexpected exits \(badExits)")",
        ]
        if let wedged { lines.append("broker wedged: \(wedged)") }
        if !workerLogs.isEmpty { lines.append("worker logs: \(workerLogs.joined(separator: ", "))") }
        return lines.joined(separator: "\n")
    }
}

public enum ThumbnailChaosChecker {
    /// - Parameters:
    ///   - ready: every record of the ready topic; `deadLetters` every record of the dead-letter topic.
    ///   - committed: the group's committed offsets per input partition; `ends` the end of each.
    public static func check(
        requests: [ThumbnailChaosInput], ready: [ConsumerRecord], deadLetters: [ConsumerRecord], committed: [Int32: Int64], ends: [Int32: Int64]
    ) -> ThumbnailChaosReport {
        var report = ThumbnailChaosReport()
        report.requests = requests.count
        // A request is named by its image: owner, owner id and image index (one image each).
        func name(_ owner: String, _ id: String, _ index: Int) -> String { "\(owner)/\(id)/\(index)" }
        func name(_ r: ThumbnailRequest) -> String { name(r.owner.rawValue, r.ownerId, r.imageIndex) }
        let known = Set(requests.map { name($0.request) })
        let byURL = Dictionary(requests.map { ($0.request.sourceURL, $0.request) }, uniquingKeysWith: { a, _ in a })
        var answered = Set<String>()
        var readyCount: [String: Int] = [:]
        for r in ready {
            guard let event = try? ThumbnailReady.decode(r.value ?? []), known.contains(name(event.owner, event.ownerId, event.imageIndex)) else {
                report.unexpected.append("ready \(r.partition)@\(r.offset)")
                continue
            }
            let key = name(event.owner, event.ownerId, event.imageIndex)
            readyCount[key, default: 0] += 1
            answered.insert(key)
        }
        report.ready = readyCount.count
        report.duplicates = readyCount.values.reduce(0) { $0 + max(0, $1 - 1) }
        for letter in deadLetters {
            guard let entry = DeadLetter(key: letter.key, value: letter.value, headers: letter.headers.map { RecordHeader(name: $0.key, value: $0.value ?? []) }, timestamp: letter.timestamp ?? 0),
                let request = try? ThumbnailRequest.decode(entry.value ?? []), let fed = byURL[request.sourceURL]
            else {
                report.unexpected.append("dead letter \(letter.partition)@\(letter.offset)")
                continue
            }
            report.deadLettered[entry.failure.reason.rawValue, default: 0] += 1
            answered.insert(name(fed))
        }
        report.lost = requests.map { name($0.request) }.filter { !answered.contains($0) }.sorted()
        let behind = ends.filter { committed[$0.key] != $0.value }.sorted { $0.key < $1.key }
        report.offsetsAtEnd = behind.isEmpty
        report.offsetsDetail = behind.map { "partition \($0.key): committed \(committed[$0.key].map(String.init) ?? "none"), end \($0.value)" }.joined(separator: "; ")
        return report
    }
}
