import ArgumentParser
import Testing
@testable import pipelinectl

@Suite struct ArgumentTests {
    @Test func unknownFlagIsNamed() {
        #expect {
            _ = try PipelineCtl.parseAsRoot(["demo", "--mesages", "5"])
        } throws: { error in
            PipelineCtl.message(for: error).contains("--mesages")
        }
    }

    @Test func produceTakesTheWorkersSecurityFlags() {
        #expect {
            _ = try PipelineCtl.parseAsRoot(["produce", "prices", "--bootstrap-server", "h:9092", "--security-protocol", "sasl_ssl"])
        } throws: { error in
            PipelineCtl.message(for: error).contains("--sasl-username is required with --security-protocol sasl_ssl")
        }
    }

    @Test func badValuesAreExplained() {
        #expect {
            _ = try PipelineCtl.parseAsRoot(["demo", "--messages", "0"])
        } throws: { error in
            PipelineCtl.message(for: error).contains("--messages must be positive")
        }
        #expect {
            _ = try PipelineCtl.parseAsRoot(["demo", "--bootstrap-server", "localhost"])
        } throws: { error in
            PipelineCtl.message(for: error).contains("'localhost' is not host:port")
        }
        #expect {
            _ = try PipelineCtl.parseAsRoot(["topics", "list", "--bootstrap-server", "h:1,nohost"])
        } throws: { error in
            PipelineCtl.message(for: error).contains("'nohost' is not host:port")
        }
        #expect {
            _ = try PipelineCtl.parseAsRoot(["topics", "create", "--bootstrap-server", "h:1", "t", "--cleanup-policy", "compacted"])
        } throws: { error in
            PipelineCtl.message(for: error).contains("--cleanup-policy: 'compacted'")
        }
        #expect {
            _ = try PipelineCtl.parseAsRoot(["perf", "produce", "--bootstrap-server", "h:1", "--topic", "t", "-X", "linger.ms"])
        } throws: { error in
            PipelineCtl.message(for: error).contains("-X 'linger.ms': expected key=value")
        }
        #expect {
            _ = try PipelineCtl.parseAsRoot(["perf", "produce", "--bootstrap-server", "h:1", "--topic", "t", "--reports", "pool"])
        } throws: { error in
            let message = PipelineCtl.message(for: error)
            return message.contains("--reports") && message.contains("'pool'")
        }
        #expect {
            _ = try PipelineCtl.parseAsRoot(["ingest", "http", "--bootstrap-server", "h:1", "-X", "acks"])
        } throws: { error in
            PipelineCtl.message(for: error).contains("-X 'acks': expected key=value")
        }
    }

    @Test func demoDefaults() throws {
        let demo = try #require(try PipelineCtl.parseAsRoot(["demo"]) as? Demo)
        #expect(demo.messages == 100_000)
        #expect(demo.size == 200)
        #expect(demo.connection.servers == nil, "no bootstrap server means the embedded local broker")
        let remote = try #require(try PipelineCtl.parseAsRoot(["demo", "--bootstrap-server", "a:1, b:2"]) as? Demo)
        #expect(remote.connection.servers == ["a:1", "b:2"])
    }

    @Test func rawPropertiesParse() throws {
        #expect(try parseProperties(["linger.ms=5", "a=b=c"]) == ["linger.ms": "5", "a": "b=c"])
        #expect(throws: ValidationError.self) { try parseProperties(["=5"]) }
    }
}
