// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "kafka-worker-pipeline",
    platforms: [.macOS(.v14)],
    products: [
        // The Kafka client alone; the worker runtime (depends on it); the operator code.
        .library(name: "Kafka", targets: ["Kafka"]),
        .library(name: "Pipeline", targets: ["Pipeline"]),
        .library(name: "Operations", targets: ["Operations"]),
        .library(name: "Workers", targets: ["Workers"]),
        .library(name: "Thumbnails", targets: ["Thumbnails"]),
        .library(name: "Push", targets: ["Push"]),
        // Test doubles: linked by tests; HTTPTesting's servers also by pipelinectl's chaos (the
        // image server) and dev (the local FCM and APNs).
        .library(name: "WorkersTesting", targets: ["WorkersTesting"]),
        .library(name: "PipelineTesting", targets: ["PipelineTesting"]),
        .library(name: "HTTPTesting", targets: ["HTTPTesting"]),
        .executable(name: "pipelinectl", targets: ["pipelinectl"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        // Already in the graph through async-http-client; named for wss:// in the WebSocket feed.
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.1"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.0.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        // pipelinectl's terminal output: progress (ConsoleKitTerminal only) and tables.
        .package(url: "https://github.com/vapor/console-kit", from: "4.16.2"),
        .package(url: "https://github.com/ordo-one/TextTable", .upToNextMinor(from: "0.0.2")),
        // The HTTP server of the producers' ingest endpoint (and the operator console's).
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        // Already in the graph through hummingbird; named for its header field types.
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        // Already in the graph through hummingbird; named for the HTTP parts a console channel
        // handler sees (NIOHTTPTypes).
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        // Already in the graph through swift-certificates (hummingbird's TLS); named for the push
        // senders' JWTs (RS256 for FCM's OAuth assertion, ES256 for APNs' provider token).
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        // Already in the graph through swift-nio-ssl; named for the local APNs' certificate.
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
    ],
    targets: [
        // C modules: the only doors into C libraries.
        .systemLibrary(
            name: "CKafka",
            pkgConfig: "rdkafka",
            providers: [.apt(["librdkafka-dev"])]
        ),
        .systemLibrary(
            name: "CVips",
            pkgConfig: "vips",
            providers: [.apt(["libvips-dev"])]
        ),

        // Pure stages: values in, values out. No Kafka, no sockets, no clocks.
        .target(name: "Workers"),

        // Deadline: bounds work that may not end in time (a blocking librdkafka call, a
        // trickled body, a blocked write), for the Kafka client and the fetchers alike.
        .target(name: "Deadlines"),

        // SafeFetch: HTTP(S) and file reads from untrusted URLs (destination checks before any
        // connection, pinned addresses, re-checked redirects, size and time limits, retries);
        // used by the thumbnail fetcher and the upstream pollers.
        .target(
            name: "SafeFetch",
            dependencies: [
                "Deadlines",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // Thumbnails: libvips resize, the store side, and the `thumbnails.render` transform (a
        // Workers ConcurrentTransform) the runtime runs on Kafka.
        .target(
            name: "Thumbnails",
            dependencies: [
                "Deadlines",
                "CVips",
                "SafeFetch",
                "Workers",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // Push delivery: the FCM (and APNs) senders, I/O stages like the thumbnail worker, with
        // the sent ledger they read from Kafka.
        .target(
            name: "Push",
            dependencies: [
                "Deadlines",
                "Kafka",
                "Workers",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                // APNs' connection: the trust roots of a `ca-file`.
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),

        // The Kafka client: only its RDKafka* files import CKafka; it knows nothing of the runtime.
        .target(
            name: "Kafka",
            dependencies: [
                "Deadlines",
                "CKafka",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The runtime that hosts a stage on Kafka (Runtime/, Topology/, Observability/).
        // A worker built on `Pipeline` links neither the WebSocket ingest nor TLS.
        .target(
            name: "Pipeline",
            dependencies: [
                "Deadlines",
                "Kafka",
                "Workers",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // What the operator commands compute (lag, redrive, offset reset, replay, the chaos
        // verifier) and the local broker; it may use the runtime's topology and observability,
        // never the reverse.
        .target(
            name: "Operations",
            dependencies: [
                "Deadlines",
                "Kafka",
                "Workers",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),

        // Producers: services that bring upstream records into the input topics, with the
        // workers' lifecycle, metrics and health (`pipelinectl ingest http`, `ingest poll`,
        // `ingest ticker`: HTTP posts, polled list APIs, a WebSocket feed).
        .target(
            name: "Producers",
            dependencies: [
                "HTTPServing",
                "Kafka",
                "Pipeline",
                "Operations",
                "SafeFetch",
                "Workers",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),

        // The HTTP/1 servers of the endpoints people and their tools call, with an idle timeout
        // and HTTP/1.0's connection rules: `ingest http`'s on NIO's codec alone (its hot path),
        // the console's on Hummingbird.
        .target(
            name: "HTTPServing",
            dependencies: [
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),

        // Console: the operator web console (`pipelinectl console`), pages over Operations.
        .target(
            name: "Console",
            dependencies: [
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                "HTTPServing",
                "Kafka",
                "Pipeline",
                "Operations",
                "Workers",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),

        // Test doubles: TestDriver (a stage without a broker), a stage's metrics as tests read
        // them (MetricsTestKit), a scriptable WebSocket server.
        .target(name: "WorkersTesting", dependencies: ["Workers"]),
        .target(
            name: "PipelineTesting",
            dependencies: [
                "Kafka", "Pipeline", "Workers", .product(name: "Logging", package: "swift-log"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ]),
        // A scriptable HTTP server for tests on Hummingbird (scripted answers per path: status,
        // headers, body, redirects, hangs, trickled bodies; handlers for fake list APIs).
        .target(
            name: "HTTPTesting",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                // The local FCM checks the service account's RS256 assertion, the local APNs
                // the provider token's ES256 signature.
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                // The local APNs: HTTP/2 over TLS with a certificate made at start.
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
            ]),

        .executableTarget(
            name: "pipelinectl",
            dependencies: [
                "Deadlines",
                "Kafka",
                "Pipeline",
                "Console",
                "Operations",
                "Producers",
                "SafeFetch",
                "Workers",
                "Thumbnails",
                "Push",
                // `perf produce` runs its task on an event loop (its executor).
                "HTTPServing",
                // The image server of `pipelinectl chaos --workload thumbnails` (slow bodies, hangs).
                "HTTPTesting",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                // The sample server of `pipelinectl dev`.
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ConsoleKitTerminal", package: "console-kit"),
                .product(name: "TextTable", package: "TextTable"),
            ]
        ),

        // Benchmarks (release builds, run by scripts/bench-*; not tests).
        .executableTarget(
            name: "decode-bench", dependencies: ["Workers"], path: "Benchmarks/DecodeBench",
            exclude: ["peer_pydantic.py", "peer_msgspec.py", "peer_timing.py"]),
        .executableTarget(
            name: "hotpath-bench", dependencies: ["Kafka", "Pipeline", "Producers", "Workers", .product(name: "Logging", package: "swift-log")], path: "Benchmarks/HotPathBench"),
        .executableTarget(
            name: "thumbnail-bench", dependencies: ["SafeFetch", "Thumbnails"], path: "Benchmarks/ThumbnailBench", exclude: ["bench_worker.py"]),
        .executableTarget(
            name: "push-bench",
            dependencies: [
                "Push", "Workers", "HTTPTesting", .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            path: "Benchmarks/PushBench", exclude: ["peer_httpx.py"]),

        // Tests, one target per module: all but IntegrationTests need no broker (they use
        // values, librdkafka's in-process mock cluster and local HTTP servers);
        // IntegrationTests start the local tansu broker.
        .testTarget(
            name: "KafkaTests",
            dependencies: ["Kafka", "PipelineTesting"]),
        .testTarget(
            name: "PipelineTests",
            dependencies: [
                "Deadlines",
                "Kafka", "Pipeline", "Operations", "PipelineTesting", "Workers", "WorkersTesting",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ]),
        .testTarget(
            name: "OperationsTests",
            dependencies: ["Kafka", "Pipeline", "Operations", "PipelineTesting", "Workers"]),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "Deadlines",
                "Kafka", "Pipeline", "Console", "Operations", "Producers", "PipelineTesting", "HTTPTesting", "SafeFetch", "Workers",
                "WorkersTesting",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ]),
        .testTarget(
            name: "ConsoleTests",
            dependencies: [
                "Console", "Operations", "Pipeline", "Kafka", "Workers", "HTTPTesting",
                // The console over HTTP in tests: its own server on port 0, a client that sets any Host.
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        .testTarget(
            name: "ProducersTests",
            dependencies: [
                "Producers", "Pipeline", "Operations", "Kafka", "PipelineTesting", "SafeFetch", "Workers", "WorkersTesting",
                "HTTPServing", "HTTPTesting",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ]),
        .testTarget(
            name: "WorkersTests",
            dependencies: ["Workers", "WorkersTesting", .product(name: "PropertyBased", package: "swift-property-based")]
        ),
        .testTarget(
            name: "PushTests",
            dependencies: [
                "Push",
                "Workers",
                "HTTPTesting",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        .testTarget(
            name: "ThumbnailsTests",
            dependencies: [
                "SafeFetch",
                "Thumbnails",
                "Kafka",
                "Pipeline",
                "PipelineTesting",
                "Operations",
                "Workers",
                "HTTPTesting",
            ]
        ),
        .testTarget(
            name: "PipelinectlTests", dependencies: ["pipelinectl", .product(name: "TextTable", package: "TextTable")], exclude: ["Golden"]),
    ],
    swiftLanguageModes: [.v6]
)
