// A non-owning reference to a callable, for the thread pool's jobs: binding a lambda never allocates (a
// std::function copies a lambda whose captures pass its small buffer to the heap, and a forward issues a few
// dozen parallel regions per token). The callable must outlive the reference: pass lambdas as arguments only.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace offgrid::ops {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
public:
    template <typename F>
        requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F &, Args...>)
    FunctionRef(F && f) noexcept  // NOLINT(google-explicit-constructor): a lambda argument binds implicitly
        : object_(const_cast<void *>(static_cast<const void *>(std::addressof(f)))),
          call_([](void * o, Args... args) -> R {
              return (*static_cast<std::remove_reference_t<F> *>(o))(std::forward<Args>(args)...);
          }) {}

    R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

private:
    void * object_;
    R (*call_)(void *, Args...);
};

}  // namespace offgrid::ops
