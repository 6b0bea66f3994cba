import ArgumentParser
import Foundation
import Pipeline
import Kafka
import Operations

/// `pipelinectl replay TOPIC`: copy a slice of a topic to another topic, a file or stdout.
struct Replay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy records of a topic (partitions, offset or time range, key and header filters) to a topic, a JSON-lines file or stdout.",
        discussion: """
            Reads with a manual assignment: it never joins, commits or stores offsets for any \
            group, so live consumers are untouched. Keys, values, headers and timestamps are kept. \
            Reads each partition up to its end as of the read (the fetch's high watermark). \
            Ranges are half-open: --from-offset and --since included, --to-offset and --until \
            excluded. Times are epoch milliseconds, ISO-8601 (2024-05-06T00:00:00Z) or a duration \
            before now (30s, 15m, 2h, 7d).

            With --to-topic it is a dry run unless --execute: it prints how many records it would \
            write and the first few. Without --to-topic it writes JSON lines \
            {"topic","partition","offset","timestamp","key","value","headers"} to --output or stdout.

            Examples:
              # dry run
              pipelinectl replay prices.raw --since 2h --to-topic prices.raw.retry
              pipelinectl replay prices.raw --since 2h --to-topic prices.raw.retry \\
                  --execute --rate 500
              pipelinectl replay hangouts.raw --partition 0 --from-offset 100 \\
                  --to-offset 200 --output slice.jsonl
              pipelinectl replay notifications --key u-1 --header app=hangouts | jq .value
            """)

    @Argument(help: "The topic to read.") var topic: String
    @Option(name: .customLong("partition"), help: "Read only this partition (repeatable; default: all).") var partitions: [Int32] = []
    @Option(help: "First offset to take (per partition).") var fromOffset: Int64?
    @Option(help: "Offset to stop before (per partition).") var toOffset: Int64?
    @Option(help: "Take records with a timestamp at or after this time.") var since: String?
    @Option(help: "Take records with a timestamp before this time.") var until: String?
    @Option(help: "Take only records with this key.") var key: String?
    @Option(name: .customLong("header"), help: "Take only records with this header (name=value, or name for any value; repeatable).") var headers: [String] = []
    @Option(help: "Write to this topic (dry run unless --execute).") var toTopic: String?
    @Option(help: "Write JSON lines to this file ('-' for stdout, the default without --to-topic).") var output: String?
    @Flag(help: "With --to-topic: write (without it, only report).") var execute = false
    @Option(help: "At most this many records per second.") var rate: Double?
    @Flag(help: "Keep the original gaps between record timestamps.") var originalPacing = false
    @Flag(help: "Write each record to its own partition number (default: by key).") var keepPartition = false
    @Flag(help: "Print the summary as JSON (on standard error when records go to stdout).") var json = false
    @OptionGroup var connection: RequiredConnection

    func validate() throws {
        try checkRange(fromOffset, NumberBounds.offset, flag: "--from-offset", what: "an offset")
        try checkRange(toOffset, NumberBounds.offset, flag: "--to-offset", what: "an offset")
        if let fromOffset, let toOffset, toOffset <= fromOffset {
            throw ValidationError("--to-offset (\(toOffset)) must be greater than --from-offset (\(fromOffset))")
        }
        let s = try parseTime(since, flag: "--since"), u = try parseTime(until, flag: "--until")
        if let s, let u, u <= s { throw ValidationError("--until must be later than --since") }
        for h in headers where ReplayFilter.parseHeader(h) == nil {
            throw ValidationError("--header: '\(h)' is not name=value or name")
        }
        if toTopic != nil, output != nil { throw ValidationError("--to-topic and --output: give one destination") }
        if toTopic == nil, execute { throw ValidationError("--execute applies to --to-topic; files and stdout are always written") }
        if toTopic == topic { throw ValidationError("--to-topic: replaying \(topic) into itself would read its own writes; choose another topic") }
        if let rate, !(rate.isFinite && rate >= 0.001) { throw ValidationError("--rate must be a number of records per second from 0.001 up, got \(rate)") }
        if rate != nil, originalPacing { throw ValidationError("--rate and --original-pacing: choose one") }
        for p in partitions { try checkRange(Int64(p), NumberBounds.partition, flag: "--partition", what: "a partition") }
    }

    func filter() throws -> ReplayFilter {
        var f = ReplayFilter()
        f.partitions = partitions.isEmpty ? nil : Set(partitions)
        f.fromOffset = fromOffset
        f.toOffset = toOffset
        f.since = try parseTime(since, flag: "--since")
        f.until = try parseTime(until, flag: "--until")
        f.key = key
        f.headers = headers.compactMap(ReplayFilter.parseHeader)
        return f
    }

    struct Summary: Encodable {
        var topic: String
        var read: Int
        var matched: Int
        var written: Int
        var destination: String
        var dryRun: Bool
        var failed: Int
    }

    func run() async throws {
        try Preflight.checkRuntime()
        let filter = try filter()
        let kafka = connection.kafka
        let admin = try KafkaAdmin(configuration: kafka)
        let all: [TopicPartition]
        do {
            all = try await topicPartitions(of: topic, admin: admin, flag: "TOPIC")
            if let missing = partitions.first(where: { p in !all.contains { $0.partition == p } }) {
                throw ValidationError("--partition \(missing): \(topic) has partitions 0…\(all.count - 1)")
            }
            if let toTopic { _ = try await topicPartitions(of: toTopic, admin: admin, flag: "--to-topic") }
        } catch {
            await admin.close()
            throw error
        }
        let selected = all.filter { filter.partitions?.contains($0.partition) ?? true }
        // For the progress bar only: ListOffsets can under-report (tansu), the read does not use it.
        var estimate = 0
        if Terminal.stderrIsTTY {
            for tp in selected {
                if let w = try? await admin.watermarks(tp) {
                    let lo = max(w.low, fromOffset ?? w.low), hi = min(w.high, toOffset ?? w.high)
                    estimate += Int(max(0, hi - lo))
                }
            }
        }
        await admin.close()

        let toStdout = toTopic == nil && (output == nil || output == "-")
        var file: FileHandle?
        if toTopic == nil, let output, output != "-" {
            guard FileManager.default.createFile(atPath: output, contents: nil), let handle = FileHandle(forWritingAtPath: output) else {
                throw ValidationError("--output: cannot write '\(output)'")
            }
            file = handle
        }
        let producer = toTopic != nil && execute ? try KafkaProducer(configuration: ProducerConfiguration(kafka: kafka)) : nil
        var pacer = Pacer(rate.map { .perSecond($0) } ?? (originalPacing ? .original : .unlimited))
        let progress = ProgressIndicator("replaying \(topic)", total: estimate > 0 ? estimate : nil)
        defer { progress.finish() }
        var read = 0, matched = 0, written = 0, failed = 0
        var preview: [String] = []
        let reader = TopicReader(kafka: kafka)
        try await reader.read(from: filter.startOffsets(selected), until: filter.stopOffsets(selected)) { batch in
            read += batch.count
            let taken = batch.filter(filter.matches)
            matched += taken.count
            if let toTopic {
                if let producer {
                    if case .unlimited = pacer.mode {
                        let reports = try await producer.send(taken.map { $0.replayed(to: toTopic, keepPartition: keepPartition) })
                        failed += reports.filter { $0.error != nil }.count
                        written += reports.count
                    } else {
                        for r in taken {
                            let wait = pacer.delay(before: r)
                            if wait > .zero { try await Task.sleep(for: wait) }
                            do { _ = try await producer.send(r.replayed(to: toTopic, keepPartition: keepPartition)); written += 1 } catch { failed += 1 }
                        }
                    }
                } else {
                    for r in taken where preview.count < 5 { preview.append(RecordJSON.line(r)) }
                }
            } else {
                for r in taken {
                    let wait = pacer.delay(before: r)
                    if wait > .zero { try await Task.sleep(for: wait) }
                    let line = Data((RecordJSON.line(r) + "\n").utf8)
                    if let file { file.write(line) } else { FileHandle.standardOutput.write(line) }
                    written += 1
                }
            }
            progress.update(read, extra: "matched \(matched)")
            return true
        }
        progress.finish()
        try file?.close()
        if let producer { await producer.close() }
        let destination = toTopic.map { "topic \($0)" } ?? (toStdout ? "stdout" : "file \(output!)")
        let summary = Summary(topic: topic, read: read, matched: matched, written: written - failed, destination: destination,
                              dryRun: toTopic != nil && !execute, failed: failed)
        let say: (String) -> Void = toStdout ? { Terminal.error($0) } : { print($0) }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            say(String(decoding: try encoder.encode(summary), as: UTF8.self))
        } else if summary.dryRun {
            for line in preview { say(line) }
            say("dry run: would write \(matched) of \(read) records read from \(topic) to \(destination); add --execute to write")
        } else {
            say("wrote \(summary.written) of \(read) records read from \(topic) to \(destination)")
        }
        if failed > 0 {
            Terminal.error("\(failed) records were not delivered")
            throw ExitCode(Exit.failure)
        }
    }
}
