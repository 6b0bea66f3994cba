/// Runs the tasks that begin while a worker runs (each lane's settlement, as partitions are
/// assigned) as children of the worker's task group: ``run()`` is one child of
/// ``StageService/run()``'s group and runs every task handed to ``start(_:)`` in a group of its
/// own. None outlives the worker, and cancelling the worker's group cancels them.
final class ChildTasks: Sendable {
    private let tasks: AsyncStream<@Sendable () async -> Void>
    private let intake: AsyncStream<@Sendable () async -> Void>.Continuation

    init() { (tasks, intake) = AsyncStream.makeStream() }

    /// Runs `body` as a child of ``run()``; false (and `body` never runs) once ``finish()`` was called.
    func start(_ body: @escaping @Sendable () async -> Void) -> Bool {
        if case .terminated = intake.yield(body) { return false }
        return true
    }

    /// Runs what is started until ``finish()`` (then until those tasks end) or cancellation.
    func run() async {
        await withDiscardingTaskGroup { group in
            for await body in tasks { group.addTask { await body() } }
        }
    }

    /// Takes no more tasks; ``run()`` returns once those it runs have ended.
    func finish() { intake.finish() }
}
