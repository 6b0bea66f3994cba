import ArgumentParser
import Foundation
import Workers

/// `pipelinectl run`: runs transforms over a JSON-lines file or standard input and prints
/// outputs and decode failures as JSON lines. No broker. The work is done by
/// `Workers.JSONLinesRunner` and `Workers.TransformCatalog`; this only parses flags and does I/O.
struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run transforms over JSON lines, without a broker.",
        discussion: """
            Transforms, chained in order with commas (--transform prices.decode,prices.candles):
              \(TransformCatalog.names.joined(separator: ", "))

            Input: one record per line, either an envelope (only "value" is required)
              {"topic":"t","partition":0,"offset":7,"key":"k",
               "value":<JSON|"text"|null>,"headers":{"h":"v"},"timestamp":1700000000000}
            or a bare upstream JSON message, used as the value. A record's timestamp is \
            the transforms' "now"; a line without one reuses the previous record's.

            Output: one line per produced record or dead letter
              {"type":"output","output":..,"key":..,"value":..,
               "headers":{..},"dedupe_key":..}
              {"type":"dead-letter","key":..,"value":<the input, unchanged>,
               "headers":{..,"dead-letter.stage":..,"dead-letter.transform":..,
               "dead-letter.reason":..,"dead-letter.field":..,"dead-letter.detail":..,
               "dead-letter.origin.topic":..,..}}
            (a dead letter is exactly the record the worker sends to the dead-letter topic; \
            its stage is the chain's name here, there is no topology)
            """
    )

    @Option(name: .long, help: "Comma-separated transform names, run as one chain in this order.")
    var transform: String

    @Option(name: .long, help: "JSON-lines input file (default: standard input).")
    var input: String?

    @Option(name: .long, help: "Topic recorded for input lines that name none.")
    var topic = "stdin"

    @Option(name: .long, help: "UTC offset, in hours, of upstream dates without a zone (Korean time: 9).")
    var utcOffsetHours = 9

    @Option(name: .long, help: "prices.candles: allowed lateness in milliseconds.")
    var candleLatenessMs: Int64 = 10_000

    @Option(name: .long, help: "campaigns.feed: snapshot size.")
    var feedTop = 60

    @Option(name: .long, help: "campaigns.feed: where the user comes from, 'key' or 'header:NAME'.")
    var feedUser = "header:user-id"

    @Option(name: .long, help: "products.new-notifications: batching interval in milliseconds.")
    var newProductsIntervalMs: Int64 = 300_000

    @Option(name: .long, help: "prices.alerts: a subscription TOKEN:MARKET:THRESHOLD (signed ratio, e.g. tok1:KRW-BTC:0.05); repeatable.")
    var alert: [String] = []

    @Option(name: .long, help: "Largest accepted value in bytes.")
    var maxBytes = DecodeLimits.default.maxBytes

    @Option(name: .long, help: "Deepest accepted JSON nesting.")
    var maxDepth = DecodeLimits.default.maxDepth

    @Option(name: .long, help: "After the input, let time pass to this epoch-ms value (closes batching windows).")
    var advanceTo: Int64?

    func validate() throws {
        _ = try makeRunner()
        guard (-14...14).contains(utcOffsetHours) else {
            throw ValidationError("--utc-offset-hours must be between -14 and 14, got \(utcOffsetHours)")
        }
        guard feedTop > 0 else { throw ValidationError("--feed-top must be positive, got \(feedTop)") }
    }

    /// The chain named by `--transform`, configured from the flags; a `ValidationError` names what is wrong.
    func makeRunner() throws -> TransformRunner {
        var options = TransformCatalog.Options()
        options.utcOffsetSeconds = utcOffsetHours * 3600
        options.candleLatenessMillis = candleLatenessMs
        options.feedTopN = feedTop
        options.newProductsIntervalMillis = newProductsIntervalMs
        options.limits = DecodeLimits(maxBytes: maxBytes, maxDepth: maxDepth)
        if feedUser == "key" {
            options.feedUser = .key
        } else if feedUser.hasPrefix("header:"), feedUser.count > 7 {
            options.feedUser = .header(String(feedUser.dropFirst(7)))
        } else {
            throw ValidationError("--feed-user must be 'key' or 'header:NAME', got '\(feedUser)'")
        }
        options.alerts = try alert.map { spec in
            let parts = spec.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty, let threshold = Double(parts[2]), threshold.isFinite else {
                throw ValidationError("--alert must be TOKEN:MARKET:THRESHOLD (e.g. tok1:KRW-BTC:0.05), got '\(spec)'")
            }
            return .init(subscriber: String(parts[0]), market: String(parts[1]), threshold: threshold)
        }
        let names = transform.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        guard !names.isEmpty, !names.contains(where: \.isEmpty) else {
            throw ValidationError("--transform needs one or more transform names separated by commas, got '\(transform)'")
        }
        do {
            return try TransformCatalog(options: options).runner(for: names)
        } catch {
            throw ValidationError(error.description)
        }
    }

    func run() throws {
        let handle: FileHandle
        if let input {
            guard let file = FileHandle(forReadingAtPath: input) else {
                throw ValidationError("cannot open --input file '\(input)'")
            }
            handle = file
        } else {
            handle = FileHandle.standardInput
        }
        try execute(lines: LineSequence(handle: handle)) { print($0) }
    }

    /// Runs the chain over `lines`, handing every output line to `write` (tests capture them).
    func execute(lines: some Sequence<String>, write: (String) -> Void) throws {
        var runner = JSONLinesRunner(runner: try makeRunner(), defaultTopic: topic)
        for line in lines {
            for out in runner.process(line: line) { write(out) }
        }
        if let advanceTo {
            for out in runner.advance(to: advanceTo) { write(out) }
        }
    }
}

/// Lines of a file handle, read in 64 KiB chunks (inputs can be larger than memory is happy with).
struct LineSequence: Sequence, IteratorProtocol {
    let handle: FileHandle
    private var buffer: [UInt8] = []
    private var start = 0
    private var done = false

    init(handle: FileHandle) { self.handle = handle }

    mutating func next() -> String? {
        while true {
            if let nl = buffer[start...].firstIndex(of: 0x0A) {
                let line = String(decoding: buffer[start..<nl], as: UTF8.self)
                start = nl + 1
                return line
            }
            if done {
                guard start < buffer.count else { return nil }
                let line = String(decoding: buffer[start...], as: UTF8.self)
                start = buffer.count
                return line
            }
            buffer.removeFirst(start)
            start = 0
            let chunk = handle.readData(ofLength: 1 << 16)
            if chunk.isEmpty { done = true } else { buffer.append(contentsOf: chunk) }
        }
    }
}
