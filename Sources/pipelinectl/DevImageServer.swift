import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Thumbnails

/// Serves the images the samples reference (`http://127.0.0.1:8089/images/<name>`,
/// names in `samples/images.txt`) for `pipelinectl dev`, so the thumbnail worker
/// fetches real images over real HTTP. Each image is a generated PNG (a gradient tinted by its
/// name, 480x360), made on first request; any other path is a 404.
final class DevImageServer: Sendable {
    static let port = 8089
    private let channel: any Channel
    let names: Set<String>

    init(imageList: String) async throws {
        let text = (try? String(contentsOfFile: imageList, encoding: .utf8)) ?? ""
        let names = Set(text.split(whereSeparator: \.isNewline).map(String.init).filter { !$0.isEmpty })
        self.names = names
        do {
            channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelInitializer { channel in
                    channel.pipeline.configureHTTPServerPipeline().flatMap {
                        channel.pipeline.addHandler(Handler(names: names))
                    }
                }
                .bind(host: "127.0.0.1", port: Self.port).get()
        } catch {
            throw DevImageServerError(
                description: "cannot serve the sample images on 127.0.0.1:\(Self.port) (the samples' image URLs point there): \(error)")
        }
    }

    func close() async { try? await channel.close() }

    struct DevImageServerError: Error, CustomStringConvertible { var description: String }

    private final class Handler: ChannelInboundHandler, Sendable {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        let names: Set<String>
        init(names: Set<String>) { self.names = names }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard case .head(let head) = unwrapInboundIn(data) else { return }
            // /images/<name> (products, spending proofs) and /static-file/<name> (the meetup app's images).
            let name =
                head.uri.hasPrefix("/images/") ? String(head.uri.dropFirst("/images/".count))
                : head.uri.hasPrefix("/static-file/") ? String(head.uri.dropFirst("/static-file/".count)) : ""
            let body = names.contains(name) ? SampleImage.png(named: name) : nil
            var headers = HTTPHeaders()
            headers.add(name: "Content-Length", value: String(body?.count ?? 0))
            if body != nil { headers.add(name: "Content-Type", value: "image/png") }
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: body == nil ? .notFound : .ok, headers: headers))), promise: nil)
            if let body { context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil) }
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}

/// A generated sample image: a gradient tinted by the name.
enum SampleImage {
    static func png(named name: String, width: Int = 480, height: Int = 360) -> [UInt8] {
        var hash: UInt32 = 2_166_136_261
        for b in name.utf8 { hash = (hash ^ UInt32(b)) &* 16_777_619 }
        let tint = (UInt8(truncatingIfNeeded: hash), UInt8(truncatingIfNeeded: hash >> 8), UInt8(truncatingIfNeeded: hash >> 16))
        var raw: [UInt8] = []
        raw.reserveCapacity((width * 3 + 1) * height)
        for y in 0..<height {
            raw.append(0)
            for x in 0..<width {
                raw.append(UInt8(truncatingIfNeeded: Int(tint.0) / 2 + x * 127 / width))
                raw.append(UInt8(truncatingIfNeeded: Int(tint.1) / 2 + y * 127 / height))
                raw.append(UInt8(truncatingIfNeeded: Int(tint.2) / 2 + (x + y) * 127 / (width + height)))
            }
        }
        return StoredPNG.encode(width: width, height: height, raw: raw)
    }
}
