//===- K3Dialect.td - the k3 dialect definition ------------*- tablegen -*-===//
//
// The k3 dialect models the Kimi K3 family (K3_SPEC.md) at the level of the
// spec's sections: one op per mechanism, typed recurrent/latent state, and
// symbolic weight references.
//
//===----------------------------------------------------------------------===//

#ifndef K3_DIALECT_K3_IR_K3DIALECT_TD
#define K3_DIALECT_K3_IR_K3DIALECT_TD

include "mlir/IR/OpBase.td"

def K3_Dialect : Dialect {
  let name = "k3";
  let cppNamespace = "::mlir::k3";
  let summary = "Ops, state types and weight references of the Kimi K3 family";
  let description = [{
    The `k3` dialect represents a Kimi K3 (or Kimi Linear) language model as
    imported from a Hugging Face `config.json`:

    * one op per spec mechanism: token embedding and LM head (§3.2), RMSNorm
      and the sigmoid-gated RMSNorm (§2, §4.7), Block Attention Residuals
      (§3.1), the depthwise short convolution (§4.2), Kimi Delta Attention
      (§4.3–4.6), gated NoPE MLA (§5), Stable LatentMoE (§6, §7) and the dense
      SiTU MLP (§6.4);
    * typed state: `!k3.kda_state`, `!k3.conv_state`, `!k3.mla_cache`, passed
      into and returned from the ops that update it (value semantics);
    * weights as symbolic references to checkpoint tensors (`k3.weight`),
      never embedded constants; MXFP4 expert stacks have their own type,
      `!k3.mxfp4`.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::func::FuncDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

class K3_Op<string mnemonic, list<Trait> traits = []>
    : Op<K3_Dialect, mnemonic, traits>;

#endif // K3_DIALECT_K3_IR_K3DIALECT_TD
