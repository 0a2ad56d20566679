package alloc_test

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	. "github.com/eni-cni/eni-cni/alloc"
)

// TestCloneSharesNothing fills every exported field of a State, the ec2
// section's included, and checks that Clone copies it all and shares no
// slice, map or pointer with the original: a field added later is filled
// by the same walk, so a Clone that forgets it fails here, not as one
// pass's change leaking into the state a store hands out next.
func TestCloneSharesNothing(t *testing.T) {
	var st State
	fill(reflect.ValueOf(&st).Elem(), 0)
	c := st.Clone()
	if !reflect.DeepEqual(&st, c) {
		t.Fatalf("clone differs:\n%+v\n%+v", st, *c)
	}
	shared(t, "State", reflect.ValueOf(st), reflect.ValueOf(*c))
	if (&State{}).Clone().EC2 != nil {
		t.Error("clone of a state without an ec2 section has one")
	}
}

var (
	timeType   = reflect.TypeFor[time.Time]()
	addrType   = reflect.TypeFor[netip.Addr]()
	prefixType = reflect.TypeFor[netip.Prefix]()
)

// fill sets v, and everything it holds, to values that are not zero.
func fill(v reflect.Value, depth int) {
	switch v.Type() {
	case timeType:
		v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, depth, time.UTC)))
		return
	case addrType:
		v.Set(reflect.ValueOf(netip.AddrFrom4([4]byte{10, 0, 0, byte(depth + 1)})))
		return
	case prefixType:
		v.Set(reflect.ValueOf(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(depth), 0, 0}), 16)))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), depth+i+1)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("s" + string(rune('a'+depth%26)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(depth + 1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(depth + 1))
	}
}

// shared fails for each slice, map or pointer a and b have in common.
func shared(t *testing.T, path string, a, b reflect.Value) {
	t.Helper()
	switch a.Type() {
	case timeType, addrType, prefixType:
		return // values; what they point to is immutable
	}
	switch a.Kind() {
	case reflect.Struct:
		for i := range a.NumField() {
			if a.Type().Field(i).IsExported() {
				shared(t, path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i))
			}
		}
	case reflect.Pointer, reflect.Map:
		if !a.IsNil() && a.UnsafePointer() == b.UnsafePointer() {
			t.Errorf("%s is shared by the clone", path)
			return
		}
		if a.Kind() == reflect.Pointer && !a.IsNil() {
			shared(t, path, a.Elem(), b.Elem())
		}
	case reflect.Slice:
		if a.Len() > 0 && a.UnsafePointer() == b.UnsafePointer() {
			t.Errorf("%s is shared by the clone", path)
			return
		}
		for i := range a.Len() {
			shared(t, path+"[]", a.Index(i), b.Index(i))
		}
	}
}
