import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTPTypes
import Operations
import Pipeline

/// Whether a state-changing request (anything but GET and HEAD) comes from the console's own
/// pages. `Origin`, when a browser sends it, must be the request's own: `http://` or
/// `https://` and the request's `Host`. `Origin: null` (a sandboxed frame, a `data:` page, a
/// cross-site redirect, or a page under `Referrer-Policy: no-referrer`) names no site: it passes
/// only with `Sec-Fetch-Site: same-origin`, which the browser sets and no page can. Without
/// `Origin`, `Sec-Fetch-Site` must be `same-origin` or `none` (typed or bookmarked). A client
/// that sends neither is not a browser on another site; the CSRF token is checked as well.
enum SameOrigin {
    static let secFetchSite = HTTPField.Name("Sec-Fetch-Site")!

    /// Why the request is refused, or nil.
    static func problem(_ request: HTTPRequest) -> String? {
        let site = request.headerFields[secFetchSite]
        if let origin = request.headerFields[.origin] {
            if origin == "null" {
                return site == "same-origin" ? nil : "its Origin is null and its Sec-Fetch-Site \(site.map { "'\($0)'" } ?? "missing"), not same-origin"
            }
            let own = request.authority.map { $0.lowercased() }
            let o = origin.lowercased()
            guard let own, o == "http://\(own)" || o == "https://\(own)" else {
                return "its Origin '\(origin)' is not this console's own (\(own.map { "http://\($0)" } ?? "no Host"))"
            }
            return nil
        }
        if let site, site != "same-origin", site != "none" {
            return "its Sec-Fetch-Site is '\(site)', not same-origin"
        }
        return nil
    }
}

/// Every request passes here before the routes, in this order:
/// 1. `Host` must be one of the console's names (``HostPolicy``), or 421;
/// 2. a state change (anything but GET and HEAD) must come from the console's own pages
///    (``SameOrigin``), or 403;
/// 3. with tokens, every request but `/login`, `/logout`, the static files, `/healthz` and the
///    icon must carry one (`Authorization: Bearer TOKEN`, or the session cookie `/login` sets):
///    a page request without it is sent to `/login`, anything else gets 401;
/// 4. a state change by a viewer (``ConsoleAccess/Role/viewer``) is refused with 403.
/// The routes run as the token's owner (``CurrentUser``; "loopback" without tokens). A
/// parameter a route cannot take (``BadParameter``) is answered 400 with the reason.
struct Guarded<Inner: HTTPResponder>: HTTPResponder where Inner.Context == BasicRequestContext {
    typealias Context = BasicRequestContext
    let inner: Inner
    let access: ConsoleAccess
    let sessions: Sessions
    let hosts: HostPolicy

    func respond(to request: Request, context: Context) async throws -> Response {
        guard hosts.allows(authority: request.head.authority) else {
            let host = request.head.authority.map { "'\($0)'" } ?? "missing"
            return ConsoleService.refusal(421, """
                Refused: the Host \(host) is not a name of this console. A page of another site can reach a console \
                on this machine under a name of its own (DNS rebinding), so only localhost, the loopback addresses, the \
                address the console listens on and the names given with --allowed-host are answered. If this is how you \
                reach the console, start it with --allowed-host NAME.

                """)
        }
        let changes = request.method != .get && request.method != .head
        if changes, let problem = SameOrigin.problem(request.head) {
            return ConsoleService.refusal(403, """
                Refused: a cross-site request (\(problem)). The console takes state changes only from its own pages: \
                open it at its own address and submit the form there.

                """)
        }
        do {
            let path = request.uri.path
            guard access.requiresToken, !TokenFree.paths.contains(path), !path.hasPrefix("/static/") else {
                return try await inner.respond(to: request, context: context)
            }
            guard let user = user(of: request) else { return Self.unauthorized(request) }
            if changes, user.role == .viewer {
                return ConsoleService.refusal(403, """
                    Refused: \(user.name)'s token is a viewer's; redrives and offset resets need an operator's token.

                    """)
            }
            return try await CurrentUser.$user.withValue(user) { try await inner.respond(to: request, context: context) }
        } catch let error as BadParameter {
            return ConsoleService.badRequest(error)
        }
    }


    /// The owner of the request's bearer token or session, if any.
    private func user(of request: Request) -> ConsoleAccess.User? {
        if let authorization = request.headers[.authorization], authorization.hasPrefix("Bearer ") {
            return access.user(presenting: Array(authorization.dropFirst("Bearer ".count).utf8))
        }
        return Sessions.id(inCookies: request.headers[.cookie]).flatMap { sessions.user($0) }
    }

    private static func unauthorized(_ request: Request) -> Response {
        var fields = ConsoleService.securityHeaders
        if request.method == .get, !request.uri.path.hasPrefix("/api/") {
            fields[.location] = "/login"
            return Response(status: .seeOther, headers: fields)
        }
        fields[.wwwAuthenticate] = #"Bearer realm="console""#
        fields[.connection] = "close"
        return Response(status: .unauthorized, headers: fields)
    }
}

/// Paths answered without a token (besides the static files).
enum TokenFree {
    static let paths: Set<String> = ["/login", "/logout", "/healthz", "/favicon.ico"]
}

/// Closes a connection once a response that says `Connection: close` (a refusal, a bad
/// request) is written, instead of waiting for the rest of what the client sends (a refused
/// body, the next request).
final class CloseAfterRefusal: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart
    private var closing = false

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(let head):
            if head.headerFields[.connection] == "close" { closing = true }
            context.write(data, promise: promise)
        case .end where closing:
            context.writeAndFlush(data, promise: promise)
            context.close(promise: nil)
        default:
            context.write(data, promise: promise)
        }
    }
}
