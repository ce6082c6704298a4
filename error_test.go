package coinpulse

import "testing"

// One detail reads as ValidationError; several are named together, each
// kept in its own detail (the API's bodies and the dashboard's share it).
func TestValidationErrors(t *testing.T) {
	one := ValidationErrors(FieldError{Field: "a", Message: "unknown field"})
	if one.Code != CodeValidation || one.Message != "invalid a: unknown field" || len(one.Details) != 1 {
		t.Errorf("one: %+v", one)
	}
	two := ValidationErrors(FieldError{Field: "a", Message: "x"}, FieldError{Field: "b", Message: "y"})
	if two.Code != CodeValidation || two.Message != "invalid fields: a, b; see details" || len(two.Details) != 2 || two.Details[1].Message != "y" {
		t.Errorf("two: %+v", two)
	}
}
