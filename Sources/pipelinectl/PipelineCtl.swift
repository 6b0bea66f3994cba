import ArgumentParser

@main
struct PipelineCtl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pipelinectl",
        abstract: "Operate the Kafka worker pipeline.",
        subcommands: []
    )
}
