// What the job server's monitoring serves, rendered from a server_view: Prometheus text
// exposition (/metrics), the status page's JSON (/status.json), and the page itself (/).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server.hpp"

namespace mimatrix::job {

namespace detail {

/// `s` with every byte that is not part of well-formed UTF-8 replaced by U+FFFD: host
/// names come from workers, and one invalid label value would fail a whole scrape.
inline std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
    if (ok && n > 1) {  // no overlong forms, surrogates or code points past U+10FFFF
      const auto c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(n == 2 && c < 0xc2) && !(n == 3 && c == 0xe0 && c1 < 0xa0) && !(n == 3 && c == 0xed && c1 >= 0xa0) &&
           !(n == 4 && c == 0xf0 && c1 < 0x90) && !(n == 4 && (c > 0xf4 || (c == 0xf4 && c1 >= 0x90)));
    }
    if (ok) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xef\xbf\xbd";
      ++i;
    }
  }
  return out;
}

/// A label value of the text format: backslash, double quote and line feed escaped.
inline std::string prometheus_label(std::string_view v) {
  std::string out;
  for (char c : valid_utf8(v)) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

/// A JSON string literal, quotes included.
inline std::string json_string(std::string_view v) {
  std::string out = "\"";
  for (char c : valid_utf8(v)) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\u00";
      out += hex[(c >> 4) & 0xf];
      out += hex[c & 0xf];
    } else out += c;
  }
  return out + "\"";
}

/// The shortest text that reads back as `v`, with NaN and the infinities as Prometheus
/// spells them.
inline std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buffer[32];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, v).ptr;
  return std::string(buffer, end);
}
/// JSON has no NaN or infinity: null.
inline std::string json_number(double v) { return std::isfinite(v) ? number(v) : "null"; }

/// Samples a second a worker trains at: what it measured, else its batch over its step.
inline double samples_per_second(const worker_view& w) {
  if (w.last.throughput > 0) return w.last.throughput;
  return w.last.step_ms > 0 ? w.local_batch * 1000.0 / w.last.step_ms : 0;
}

}  // namespace detail

/// The Prometheus text exposition format (version 0.0.4) of `v`: the group's gauges and
/// counters, then one series a worker for each per-worker metric, labelled with its id,
/// host, rank and whether it is a member of the running generation.
inline std::string prometheus_text(const server_view& v) {
  std::string out;
  const auto family = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  const auto scalar = [&](const char* name, const char* type, const char* help, const std::string& value) {
    family(name, type, help);
    out += std::string(name) + " " + value + "\n";
  };
  scalar("mimatrix_job_generation", "gauge", "The generation the server formed last (0: none yet).",
         std::to_string(v.generation));
  scalar("mimatrix_job_running", "gauge", "1 while a generation runs, 0 while one forms.", v.running ? "1" : "0");
  scalar("mimatrix_job_completed_step", "gauge", "The last step every member of the generation completed.",
         std::to_string(v.completed_step));
  scalar("mimatrix_job_workers", "gauge", "Workers registered with the server, members and waiting.",
         std::to_string(v.workers.size()));
  scalar("mimatrix_job_generations_revoked_total", "counter",
         "Generations revoked, by a lost or failed rank or a late joiner.", std::to_string(v.generations_revoked));
  scalar("mimatrix_job_rejected_connections_total", "counter",
         "Connections closed before they authenticated.", std::to_string(v.workers_rejected));

  std::vector<std::string> labels;
  for (const auto& w : v.workers)
    labels.push_back("{worker=\"" + std::to_string(w.id) + "\",host=\"" + detail::prometheus_label(w.host) +
                     "\",rank=\"" + std::to_string(w.rank) + "\",member=\"" + (w.member ? "true" : "false") + "\"}");
  const auto per_worker = [&](const char* name, const char* help, auto value) {
    family(name, "gauge", help);
    for (std::size_t i = 0; i < v.workers.size(); ++i) out += name + labels[i] + " " + value(v.workers[i]) + "\n";
  };
  per_worker("mimatrix_job_worker_step", "The last step the worker reported in this generation.",
             [](const worker_view& w) { return std::to_string(w.last.step); });
  per_worker("mimatrix_job_worker_step_ms", "The worker's last step time, in milliseconds.",
             [](const worker_view& w) { return detail::number(w.last.step_ms); });
  per_worker("mimatrix_job_worker_allreduce_ms", "The worker's last allreduce time, in milliseconds.",
             [](const worker_view& w) { return detail::number(w.last.allreduce_ms); });
  per_worker("mimatrix_job_worker_busbw_gbps", "The worker's last allreduce bus bandwidth, in GB/s.",
             [](const worker_view& w) { return detail::number(w.last.busbw_gbps); });
  per_worker("mimatrix_job_worker_loss", "The worker's last training loss.",
             [](const worker_view& w) { return detail::number(w.last.loss); });
  per_worker("mimatrix_job_worker_local_batch", "The worker's share of the global batch.",
             [](const worker_view& w) { return std::to_string(w.local_batch); });
  per_worker("mimatrix_job_worker_seen_ms_ago", "Milliseconds since the server last heard from the worker.",
             [](const worker_view& w) { return detail::number(w.seen_ms_ago); });
  return out;
}

/// What the status page polls: the group, its throughput, and every worker.
inline std::string status_json(const server_view& v) {
  const auto num = [](double x) { return detail::json_number(x); };
  double throughput = 0;
  std::string workers;
  for (const auto& w : v.workers) {
    if (w.member) throughput += detail::samples_per_second(w);
    if (!workers.empty()) workers += ",";
    workers += "{\"id\":" + std::to_string(w.id) + ",\"host\":" + detail::json_string(w.host) +
               ",\"member\":" + (w.member ? "true" : "false") + ",\"rank\":" + std::to_string(w.rank) +
               ",\"step\":" + std::to_string(w.last.step) + ",\"step_ms\":" + num(w.last.step_ms) +
               ",\"allreduce_ms\":" + num(w.last.allreduce_ms) + ",\"busbw_gbps\":" + num(w.last.busbw_gbps) +
               ",\"loss\":" + num(w.last.loss) + ",\"local_batch\":" + std::to_string(w.local_batch) +
               ",\"samples_per_s\":" + num(detail::samples_per_second(w)) +
               ",\"seen_ms_ago\":" + num(w.seen_ms_ago) + "}";
  }
  return "{\"generation\":" + std::to_string(v.generation) + ",\"running\":" + (v.running ? "true" : "false") +
         ",\"completed_step\":" + std::to_string(v.completed_step) +
         ",\"generations_revoked\":" + std::to_string(v.generations_revoked) +
         ",\"rejected_connections\":" + std::to_string(v.workers_rejected) + ",\"throughput\":" + num(throughput) +
         ",\"workers\":[" + workers + "]}";
}

/// The status page: self-contained (no external resources), it polls /status.json every
/// second and draws the workers' table and the slowest member's step time (the group's).
inline std::string status_page_html() {
  return R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>mimatrix job server</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 18px; margin: 0 0 8px; }
#summary span { margin-right: 20px; }
#error { color: #b00020; }
table { border-collapse: collapse; margin: 12px 0; }
th, td { padding: 3px 10px; text-align: right; border-bottom: 1px solid #ddd; }
th:nth-child(2), td:nth-child(2) { text-align: left; }
tr.waiting { color: #888; }
canvas { border: 1px solid #ccc; }
</style>
</head>
<body>
<h1>mimatrix job server</h1>
<div id="summary">
<span>generation <b id="generation">-</b> <span id="state"></span></span>
<span>completed step <b id="completed">-</b></span>
<span>throughput <b id="throughput">-</b> samples/s</span>
<span>revoked <b id="revoked">-</b></span>
<span id="error"></span>
</div>
<table id="workers">
<thead><tr><th>id</th><th>host</th><th>rank</th><th>step</th><th>step ms</th><th>allreduce ms</th>
<th>busbw GB/s</th><th>loss</th><th>batch</th><th>seen</th></tr></thead>
<tbody></tbody>
</table>
<canvas id="chart" width="900" height="260"></canvas>
<script>
"use strict";
const keep = 120;   // points of the chart: two minutes at one poll a second
const points = [];
const $ = (id) => document.getElementById(id);
const fixed = (v, digits) => (v === null || v === undefined) ? "-" : Number(v).toFixed(digits);

function render(s) {
  $("generation").textContent = s.generation;
  $("state").textContent = s.running ? "(running)" : "(forming)";
  $("completed").textContent = s.completed_step;
  $("throughput").textContent = fixed(s.throughput, 1);
  $("revoked").textContent = s.generations_revoked;
  const rows = s.workers.map((w) => {
    const tr = document.createElement("tr");
    tr.className = w.member ? "worker" : "worker waiting";
    const cells = [w.id, w.host, w.member ? w.rank : "waiting", w.step, fixed(w.step_ms, 2),
                   fixed(w.allreduce_ms, 2), fixed(w.busbw_gbps, 2), fixed(w.loss, 4), w.local_batch,
                   fixed(w.seen_ms_ago, 0) + " ms ago"];
    for (const text of cells) {
      const td = document.createElement("td");
      td.textContent = text;   // text, never markup: host names come from workers
      tr.appendChild(td);
    }
    return tr;
  });
  document.querySelector("#workers tbody").replaceChildren(...rows);
  const members = s.workers.filter((w) => w.member && w.step_ms > 0);
  if (members.length > 0) {
    points.push({ step: Math.max(...members.map((w) => w.step_ms)),
                  allreduce: Math.max(...members.map((w) => w.allreduce_ms || 0)) });
    if (points.length > keep) points.shift();
  }
  draw();
}

function draw() {
  const c = $("chart"), g = c.getContext("2d");
  const left = 50, right = 10, top = 24, bottom = 24;
  const w = c.width - left - right, h = c.height - top - bottom;
  g.clearRect(0, 0, c.width, c.height);
  g.font = "12px system-ui, sans-serif";
  g.fillStyle = "#222";
  g.fillText("step time, ms (slowest member), last " + keep + " s", left, 14);
  const high = Math.max(1, ...points.map((p) => p.step)) * 1.15;
  g.strokeStyle = "#ddd";
  g.fillStyle = "#666";
  for (let k = 0; k <= 4; ++k) {
    const y = top + h - h * k / 4;
    g.beginPath(); g.moveTo(left, y); g.lineTo(left + w, y); g.stroke();
    g.fillText((high * k / 4).toFixed(1), 4, y + 4);
  }
  const line = (key, color) => {
    g.strokeStyle = color; g.lineWidth = 2; g.beginPath();
    points.forEach((p, i) => {
      const x = left + w * (keep - points.length + i) / (keep - 1);
      const y = top + h - h * p[key] / high;
      if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
    });
    g.stroke(); g.lineWidth = 1;
  };
  line("step", "#1f77b4");
  line("allreduce", "#ff7f0e");
  g.fillStyle = "#1f77b4"; g.fillText("step", left + w - 140, 14);
  g.fillStyle = "#ff7f0e"; g.fillText("allreduce", left + w - 90, 14);
}

async function poll() {
  try {
    const r = await fetch("/status.json", { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
    $("error").textContent = "";
  } catch (e) {
    $("error").textContent = "no answer from the server: " + e.message;
  }
  setTimeout(poll, 1000);
}
poll();
</script>
</body>
</html>
)html";
}

}  // namespace mimatrix::job
