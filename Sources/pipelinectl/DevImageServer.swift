import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

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

/// A generated PNG: stored (uncompressed) deflate blocks, which every decoder accepts.
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
        var out: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        out += chunk("IHDR", be32(width) + be32(height) + [8, 2, 0, 0, 0])
        out += chunk("IDAT", zlibStored(raw))
        out += chunk("IEND", [])
        return out
    }

    private static func chunk(_ type: String, _ body: [UInt8]) -> [UInt8] {
        let typed = Array(type.utf8) + body
        return be32(body.count) + typed + be32(Int(crc32(typed)))
    }

    private static func zlibStored(_ data: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [0x78, 0x01]
        var offset = 0
        repeat {
            let n = min(65_535, data.count - offset)
            out.append(offset + n == data.count ? 1 : 0)
            out += [UInt8(n & 0xff), UInt8(n >> 8), UInt8(~n & 0xff), UInt8((~n >> 8) & 0xff)]
            out += data[offset..<offset + n]
            offset += n
        } while offset < data.count
        var a: UInt32 = 1, b: UInt32 = 0
        for byte in data {
            a = (a + UInt32(byte)) % 65_521
            b = (b + a) % 65_521
        }
        return out + be32(Int(b << 16 | a))
    }

    private static let crcTable: [UInt32] = (0..<256).map { n in
        var c = UInt32(n)
        for _ in 0..<8 { c = c & 1 != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    private static func crc32(_ data: [UInt8]) -> UInt32 {
        var c: UInt32 = 0xFFFF_FFFF
        for b in data { c = crcTable[Int((c ^ UInt32(b)) & 0xff)] ^ (c >> 8) }
        return c ^ 0xFFFF_FFFF
    }

    private static func be32(_ v: Int) -> [UInt8] {
        [UInt8((v >> 24) & 0xff), UInt8((v >> 16) & 0xff), UInt8((v >> 8) & 0xff), UInt8(v & 0xff)]
    }
}
