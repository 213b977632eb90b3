// The job server's monitoring over HTTP (Boost.Beast): read-only GET /metrics
// (Prometheus), / (the status page) and /status.json, with bounded requests and deadlines.
#pragma once

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "metrics.hpp"
#include "server.hpp"

namespace mimatrix::job {

/// Where the monitor listens and what it bears from a client.
struct http_settings {
  std::string address = "127.0.0.1";  // loopback: the metrics name hosts; 0.0.0.0 shares them
  std::uint32_t header_bytes = 8 * 1024;  // a request's start line and headers
  std::uint64_t body_bytes = 8 * 1024;    // a request's body (GETs carry none)
  std::chrono::milliseconds deadline{5000};  // to read a request, or write a reply; else closed
  int requests_per_connection = 100;          // keep-alive, but not forever
  int connections = 64;                       // at once; more are closed on arrival
};

/// Serves monitoring of a job server from its view, on the job server's io_context.
///
/// @par Thread Safety
/// Runs on the io_context's one thread, the job server's, so calling `view` needs no
/// lock. Construct and destroy it on that thread or while the io_context does not run.
class http_monitor {
 public:
  http_monitor(boost::asio::io_context& io, std::uint16_t port, std::function<server_view()> view,
               http_settings settings = {})
      : io_(io), settings_(std::move(settings)), view_(std::move(view)),
        acceptor_(io, {boost::asio::ip::make_address(settings_.address), port}) {
    boost::asio::co_spawn(io_, accept_loop(), boost::asio::detached);
  }
  http_monitor(const http_monitor&) = delete;
  http_monitor& operator=(const http_monitor&) = delete;

  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  /// Connections open now.
  int connections() const { return open_; }

 private:
  using tcp = boost::asio::ip::tcp;
  using response = boost::beast::http::response<boost::beast::http::string_body>;
  template <class T> using awaitable = boost::asio::awaitable<T>;

  awaitable<void> accept_loop() {
    namespace asio = boost::asio;
    while (true) {
      boost::system::error_code ec;
      tcp::socket socket = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec == asio::error::operation_aborted) co_return;
      if (ec) continue;  // the client gave up (ECONNABORTED) or the process is out of descriptors
      if (open_ >= settings_.connections) continue;  // the socket closes here
      ++open_;
      asio::co_spawn(io_, serve(boost::beast::tcp_stream(std::move(socket))), asio::detached);
    }
  }

  /// One connection: requests in turn, each bounded in size and in time.
  awaitable<void> serve(boost::beast::tcp_stream stream) {
    namespace asio = boost::asio;
    namespace http = boost::beast::http;
    boost::beast::flat_buffer buffer;
    boost::system::error_code ec;
    for (int served = 0; served < settings_.requests_per_connection; ++served) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(settings_.header_bytes);
      parser.body_limit(settings_.body_bytes);
      stream.expires_after(settings_.deadline);  // the whole request, so a slow sender is cut off too
      co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (ec == http::error::header_limit) co_await refuse(stream, http::status::request_header_fields_too_large);
        else if (ec == http::error::body_limit) co_await refuse(stream, http::status::payload_too_large);
        else if (ec != http::error::end_of_stream && ec != boost::beast::error::timeout && !is_disconnect(ec))
          co_await refuse(stream, http::status::bad_request);
        break;
      }
      const auto& request = parser.get();
      response r;
      try {
        r = answer(request);
      } catch (const std::exception& e) {
        r = reply(http::status::internal_server_error, "text/plain; charset=utf-8", e.what() + std::string("\n"));
      }
      const bool again = request.keep_alive() && served + 1 < settings_.requests_per_connection;
      r.keep_alive(again);
      r.prepare_payload();
      stream.expires_after(settings_.deadline);
      co_await http::async_write(stream, r, asio::redirect_error(asio::use_awaitable, ec));
      if (ec || !again) break;
    }
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream.close();
    --open_;
  }

  response answer(const boost::beast::http::request<boost::beast::http::string_body>& request) const {
    namespace http = boost::beast::http;
    if (request.method() != http::verb::get) {
      response r = reply(http::status::method_not_allowed, "text/plain; charset=utf-8", "only GET is served\n");
      r.set(http::field::allow, "GET");
      return r;
    }
    std::string_view target = request.target();
    target = target.substr(0, target.find('?'));  // a query changes nothing here
    if (target == "/metrics")
      return reply(http::status::ok, "text/plain; version=0.0.4; charset=utf-8", prometheus_text(view_()));
    if (target == "/status.json") return reply(http::status::ok, "application/json", status_json(view_()));
    if (target == "/" || target == "/index.html")
      return reply(http::status::ok, "text/html; charset=utf-8", status_page_html());
    return reply(http::status::not_found, "text/plain; charset=utf-8",
                 "not found; try /, /metrics or /status.json\n");
  }

  static response reply(boost::beast::http::status status, const char* type, std::string body) {
    namespace http = boost::beast::http;
    response r{status, 11};
    r.set(http::field::server, "mimatrix-job-server");
    r.set(http::field::content_type, type);
    r.set(http::field::cache_control, "no-store");
    r.body() = std::move(body);
    return r;
  }

  /// A request refused before it was read whole: the reason, then a lingering close
  /// (read and drop what the client still sends, bounded) so that closing with unread
  /// bytes does not reset the connection before the client reads the reason.
  awaitable<void> refuse(boost::beast::tcp_stream& stream, boost::beast::http::status status) {
    namespace asio = boost::asio;
    namespace http = boost::beast::http;
    response r = reply(status, "text/plain; charset=utf-8", std::string(http::obsolete_reason(status)) + "\n");
    r.keep_alive(false);
    r.prepare_payload();
    boost::system::error_code ec;
    stream.expires_after(settings_.deadline);
    co_await http::async_write(stream, r, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream.expires_after(std::chrono::seconds(1));
    std::array<char, 4096> sink;
    for (std::size_t dropped = 0; !ec && dropped < 64 * 1024;)
      dropped += co_await stream.async_read_some(asio::buffer(sink), asio::redirect_error(asio::use_awaitable, ec));
  }

  static bool is_disconnect(const boost::system::error_code& ec) {
    namespace asio = boost::asio;
    return ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
           ec == asio::error::broken_pipe;
  }

  boost::asio::io_context& io_;
  http_settings settings_;
  std::function<server_view()> view_;
  tcp::acceptor acceptor_;
  int open_ = 0;
};

}  // namespace mimatrix::job
