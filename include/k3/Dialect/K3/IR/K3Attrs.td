//===- K3Attrs.td - k3 enums and attributes ----------------*- tablegen -*-===//

#ifndef K3_DIALECT_K3_IR_K3ATTRS_TD
#define K3_DIALECT_K3_IR_K3ATTRS_TD

include "k3/Dialect/K3/IR/K3Dialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

// K3_SPEC §4.5: the recurrent state is S (key-first, [H, K, V]) in the math,
// and Sᵀ ([H, V, K], "state_v_first") in the official code and FlashKDA.
def K3_KDAStateLayout : I32EnumAttr<"KDAStateLayout", "KDA recurrent state layout", [
    I32EnumAttrCase<"KeyFirst", 0, "key_first">,
    I32EnumAttrCase<"ValueFirst", 1, "value_first">]> {
  let cppNamespace = "::mlir::k3";
  let genSpecializedAttr = 0;
}

// K3_SPEC §4.3 and §10: K3's lower-bounded sigmoid gate, or Kimi Linear's
// softplus gate.
def K3_KDAGateForm : I32EnumAttr<"KDAGateForm", "KDA forget-gate form", [
    I32EnumAttrCase<"LowerBoundSigmoid", 0, "lower_bound_sigmoid">,
    I32EnumAttrCase<"Softplus", 1, "softplus">]> {
  let cppNamespace = "::mlir::k3";
  let genSpecializedAttr = 0;
}
def K3_KDAGateFormAttr : EnumAttr<K3_Dialect, K3_KDAGateForm, "kda_gate_form"> {
  let assemblyFormat = "`<` $value `>`";
}

// K3_SPEC §2: SiTU-GLU (K3) or SwiGLU (`silu`, Kimi Linear).
def K3_GLUActivation : I32EnumAttr<"GLUActivation", "gated MLP activation", [
    I32EnumAttrCase<"Situ", 0, "situ">,
    I32EnumAttrCase<"Silu", 1, "silu">]> {
  let cppNamespace = "::mlir::k3";
  let genSpecializedAttr = 0;
}
def K3_GLUActivationAttr : EnumAttr<K3_Dialect, K3_GLUActivation, "glu_activation"> {
  let assemblyFormat = "`<` $value `>`";
}

#endif // K3_DIALECT_K3_IR_K3ATTRS_TD
