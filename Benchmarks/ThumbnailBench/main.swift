// thumbnail-bench: renders every JPEG in a directory to the configured sizes with the
// Thumbnails stage (file:// fetch → render on a RenderPool → local blob store) and prints
// throughput. Peak memory is measured from outside (/usr/bin/time -v); see
// scripts/bench-thumbnails, which also runs vipsthumbnail and ImageMagick on the same files.
//
// Usage: thumbnail-bench --input DIR --output DIR [--in-flight N] [--vips-threads N] [--quality Q]
import Foundation
import Thumbnails
import SafeFetch

struct Options {
    var input = ""
    var output = ""
    var inFlight = 2
    var vipsThreads = 1
    var quality = 80

    init(_ arguments: [String]) throws {
        var iterator = arguments.makeIterator()
        while let flag = iterator.next() {
            guard let value = iterator.next() else { throw UsageError(message: "missing value for \(flag)") }
            switch flag {
            case "--input": input = value
            case "--output": output = value
            case "--in-flight": inFlight = try Self.int(value, flag)
            case "--vips-threads": vipsThreads = try Self.int(value, flag)
            case "--quality": quality = try Self.int(value, flag)
            default: throw UsageError(message: "unknown option \(flag)")
            }
        }
        guard !input.isEmpty, !output.isEmpty else { throw UsageError(message: "--input and --output are required") }
    }

    static func int(_ text: String, _ flag: String) throws -> Int {
        guard let value = Int(text), value > 0 else { throw UsageError(message: "\(flag) needs a positive integer") }
        return value
    }
}

struct UsageError: Error, CustomStringConvertible {
    let message: String
    var description: String {
        "\(message)\nusage: thumbnail-bench --input DIR --output DIR [--in-flight N] [--vips-threads N] [--quality Q]"
    }
}

@main
enum ThumbnailBench {
    static func main() async {
        do {
            try await run(Options(Array(CommandLine.arguments.dropFirst())))
        } catch {
            FileHandle.standardError.write(Data("thumbnail-bench: \(error)\n".utf8))
            exit(1)
        }
    }

    static func run(_ options: Options) async throws {
        let inputRoot = URL(fileURLWithPath: options.input).standardizedFileURL.path
        let files = try FileManager.default.contentsOfDirectory(atPath: inputRoot)
            .filter { $0.hasSuffix(".jpg") }
            .sorted()
            .map { "file://" + inputRoot + "/" + $0 }
        guard !files.isEmpty else { throw UsageError(message: "no .jpg files in \(inputRoot)") }

        // The same two sizes the script gives vipsthumbnail and ImageMagick.
        let specs = [
            ThumbnailSpec(name: "list", width: 200, height: 200, mode: .cover, format: .jpeg, quality: options.quality),
            ThumbnailSpec(name: "grid", width: 800, height: 800, mode: .fit, format: .jpeg, quality: options.quality),
        ]
        let pool = RenderPool(threads: options.inFlight, threadsPerImage: options.vipsThreads)
        defer { pool.shutdown() }
        var fetch = FetchConfiguration()
        fetch.fileRoots = [inputRoot]
        let service = try ThumbnailService(
            specs: specs,
            pool: pool,
            fetcher: SafeFetcher(configuration: fetch),
            // No fsync: vipsthumbnail and convert do not fsync either.
            store: LocalDirectoryBlobStore(root: options.output, syncWrites: false)
        )

        let clock = ContinuousClock()
        let start = clock.now
        // Keep twice the pool's width in flight, so a render thread never waits for a read.
        let window = options.inFlight * 2
        var thumbnails = 0
        var failures = 0
        try await withThrowingTaskGroup(of: Int.self) { group in
            var next = 0
            func submit() {
                let url = files[next]
                next += 1
                group.addTask {
                    do {
                        return try await service.process(sourceURL: url).thumbnails.count
                    } catch {
                        FileHandle.standardError.write(Data("\(url): \(error)\n".utf8))
                        return -1
                    }
                }
            }
            while next < min(window, files.count) { submit() }
            while let count = try await group.next() {
                if count < 0 { failures += 1 } else { thumbnails += count }
                if next < files.count { submit() }
            }
        }
        let elapsed = clock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        var usage = rusage()
        #if os(Linux)
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        #else
        getrusage(RUSAGE_SELF, &usage)
        #endif
        print(
            "thumbnail-bench files=\(files.count) thumbnails=\(thumbnails) failures=\(failures) "
                + "in_flight=\(options.inFlight) vips_threads=\(options.vipsThreads) "
                + String(format: "seconds=%.2f thumbs_per_s=%.1f max_rss_kb=%d", seconds, Double(thumbnails) / seconds, usage.ru_maxrss)
        )
        if failures > 0 { exit(2) }
    }
}
