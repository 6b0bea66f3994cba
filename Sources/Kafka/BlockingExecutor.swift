import Dispatch

/// Runs blocking calls (librdkafka calls with timeouts, process waits) on Dispatch's threads,
/// never on Swift's cooperative pool, and resumes the caller when they return.
public enum BlockingExecutor {
    private static let queue = DispatchQueue(label: "pipeline.blocking", qos: .userInitiated, attributes: .concurrent)

    public static func run<T: Sendable, E: Error>(_ body: @escaping @Sendable () throws(E) -> T) async throws(E) -> T {
        let result: Result<T, E> = await withCheckedContinuation { continuation in
            queue.async {
                do throws(E) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }
}
