// Shared by our two dry-run programs (membreak.cpp for llama.cpp, ik/ikkv.cpp for ik_llama.cpp): capture the
// library's log synchronously, line by line (llama-fit-params' asynchronous logger drops lines), and escape strings
// for the JSON they print. Include after ggml.h.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

static std::vector<std::string> g_log_lines;
static std::string g_log_pending;

static void capture_log(ggml_log_level level, const char * text, void * /*user_data*/) {
    (void) level;
    g_log_pending += text;
    size_t pos;
    while ((pos = g_log_pending.find('\n')) != std::string::npos) {
        g_log_lines.push_back(g_log_pending.substr(0, pos));
        g_log_pending.erase(0, pos + 1);
    }
}

static std::string json_str(const std::string & s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        switch (c) {
            case '"':  out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n";  break;
            case '\r': out += "\\r";  break;
            case '\t': out += "\\t";  break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    snprintf(buf, sizeof(buf), "\\u%04x", c);
                    out += buf;
                } else {
                    out += (char) c;
                }
        }
    }
    out += "\"";
    return out;
}
