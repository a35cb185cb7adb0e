// ft: fine-tune Transformer classifiers under any distributed strategy.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <torch/version.h>

#include "commands.h"
#include "ft/base/error.h"
#include "ft/comm/launcher.h"
#include "ft/plugin/plugin.h"
#include "ft/train/runtime.h"

namespace {

// The error contract is one line: a control character from user input (a
// tensor name or a row with a line break, a terminal escape) is shown
// escaped, and a message built around a huge input is cut.
std::string one_line(const std::string& text) {
  constexpr std::size_t kMax = 4000;
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u == '\n') out += "\\n";
    else if (u < 0x20 || u == 0x7f) out += fmt::format("\\x{:02x}", u);
    else out += c;
    if (out.size() >= kMax) {
      std::size_t cut = kMax;
      while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
      out.resize(cut);
      return out + fmt::format("... ({} bytes in all)", text.size());
    }
  }
  return out;
}

// A launched worker hands its line to the launcher, which prints one line
// for the whole job (ft/comm/launcher.h).
void print_error(const std::string& message) { ft::report_error(one_line(message)); }

// What a bug report needs: a plugin built against another LibTorch or ABI is refused.
std::string version_text() {
  return fmt::format("ft {}\nLibTorch {}\nBLAS {}\nplugin ABI {}", FT_VERSION, TORCH_VERSION,
                     ft::detect_blas().describe(), ft::kPluginAbiVersion);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ft: fine-tune BERT-style classifiers with any distributed-training strategy", "ft"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text, "print the versions of ft, LibTorch, the BLAS and the plugin ABI");
  int exit_code = 0;
  const std::vector<std::string> args(argv + 1, argv + argc);
  ft::app::add_run_command(app, exit_code, args);
  ft::app::add_strategies_command(app, exit_code);
  ft::app::add_eval_predict_commands(app, exit_code);
  ft::app::add_vocab_command(app, exit_code);
  ft::app::add_consolidate_command(app, exit_code);
  ft::app::add_export_command(app, exit_code);
  ft::app::add_import_command(app, exit_code);
  ft::app::add_bench_command(app, exit_code, args);
  ft::app::add_trace_command(app, exit_code);
  ft::app::add_config_command(app, exit_code);
  ft::app::add_checkpoint_command(app, exit_code);
  ft::app::add_features_command(app, exit_code);
  ft::app::add_tokenize_command(app, exit_code);
  ft::app::add_report_command(app, exit_code);
  ft::app::add_sweep_command(app, exit_code);
  if (argc < 2) {
    std::fputs(app.help().c_str(), stdout);  // bare `ft`: what it can do, not an error
    return 0;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    print_error(std::string(e.what()) + "; see --help");
    return e.get_exit_code();
  } catch (const ft::Error& e) {
    print_error(e.what());
    return 1;
  } catch (const c10::Error& e) {
    // c10 appends context lines ("Exception raised from ..."): the first says what.
    const std::string what = e.what_without_backtrace();
    print_error(what.substr(0, what.find('\n')));
    return 1;
  } catch (const std::exception& e) {
    print_error(e.what());
    return 1;
  }
  return exit_code;
}
