// The doctest case this process is running, for messages that doctest
// cannot attach to a case: a rank that fails prints its check and exits at
// once (conformance/harness.hpp, rank_fail), before doctest names the case,
// and under a launcher (one rank per VM or per mpirun slot) no supervisor is
// there to name it either.
//
// The suites' main() files register current_case_listener once
// (DOCTEST_REGISTER_LISTENER); a forked rank inherits the name. Single
// threaded: doctest runs cases on its main thread.
#pragma once

#include <doctest/doctest.h>

#include <string>

namespace fxt {

inline std::string current_case;  // the case's name as doctest prints it; empty outside a case

struct current_case_listener : doctest::IReporter {
  explicit current_case_listener(const doctest::ContextOptions&) {}
  // A templated case's m_name already ends in its type ("...<fabrix::ucx::provider>").
  void test_case_start(const doctest::TestCaseData& tc) override { current_case = tc.m_name; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override { current_case.clear(); }
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
};

}  // namespace fxt
