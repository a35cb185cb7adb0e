// ft: fine-tune Transformer classifiers under any distributed strategy.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include "commands.h"
#include "ft/error.h"

int main(int argc, char** argv) {
  CLI::App app{"ft: fine-tune BERT-style classifiers with any distributed-training strategy"};
  app.require_subcommand(1);
  int exit_code = 0;
  const std::vector<std::string> args(argv + 1, argv + argc);
  ft::app::add_run_command(app, exit_code, args);
  ft::app::add_strategies_command(app, exit_code);
  ft::app::add_eval_predict_commands(app, exit_code);
  ft::app::add_vocab_command(app, exit_code);
  ft::app::add_consolidate_command(app, exit_code);
  ft::app::add_bench_command(app, exit_code, args);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ft::Error& e) {
    std::fprintf(stderr, "ft: error: %s\n", e.what());
    return 1;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "ft: error: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ft: error: %s\n", e.what());
    return 1;
  }
  return exit_code;
}
